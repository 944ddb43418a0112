"""Link extraction for the crawler: the absolute http(s) links of a page (the function lives in
:mod:`crawlherd.page`, beside the other readings of a page, so that a CrawlResult can compute it).
A page over the parse budget raises :class:`~crawlherd.errors.PageTooComplexError`;
:func:`extract_links_async` parses a large page in a thread."""

from __future__ import annotations

import asyncio

from crawlherd.page import OFF_LOOP_CHARS, extract_links

__all__ = ["extract_links", "extract_links_async"]


async def extract_links_async(html: str, base_url: str) -> list[str]:
    """:func:`extract_links`, in a thread for a page longer than
    :data:`~crawlherd.page.OFF_LOOP_CHARS` so that the event loop goes on."""
    if len(html) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(extract_links, html, base_url)
    return extract_links(html, base_url)
