"""Link extraction for the crawler: the absolute http(s) links of a page."""

from __future__ import annotations

import asyncio
from urllib.parse import urljoin

from crawlherd.extract.selectors import OFF_LOOP_CHARS, parse_html

__all__ = ["extract_links", "extract_links_async"]

_SKIPPED_SCHEMES = ("#", "javascript:", "mailto:", "tel:", "data:")


def extract_links(html: str, base_url: str) -> list[str]:
    """Absolute http(s) links of ``<a href>`` in ``html`` (``<base href>`` honoured), fragments
    dropped, duplicates removed, document order kept. A page over the parse budget raises
    :class:`~crawlherd.errors.PageTooComplexError` (:func:`~crawlherd.extract.selectors.parse_html`);
    :func:`extract_links_async` parses a large page in a thread."""
    tree = parse_html(html)
    base = tree.css_first("base[href]")
    if base is not None:
        base_url = urljoin(base_url, base.attributes.get("href") or "")
    seen: dict[str, None] = {}
    for node in tree.css("a[href]"):
        href = (node.attributes.get("href") or "").strip()
        if not href or href.startswith(_SKIPPED_SCHEMES):
            continue
        url = urljoin(base_url, href).split("#", 1)[0]
        if url.startswith(("http://", "https://")):
            seen.setdefault(url, None)
    return list(seen)


async def extract_links_async(html: str, base_url: str) -> list[str]:
    """:func:`extract_links`, in a thread for a page longer than
    :data:`~crawlherd.extract.selectors.OFF_LOOP_CHARS` so that the event loop goes on."""
    if len(html) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(extract_links, html, base_url)
    return extract_links(html, base_url)
