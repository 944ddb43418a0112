"""The browser a :class:`~crawlherd.crawler.Crawler` renders pages with when its own fetcher cannot.

crawl4ai's ``AsyncWebCrawler`` always drives a browser, so ``CrawlerRunConfig(screenshot=True)`` (or a
``wait_for``, or page actions) gives a rendered page. crawlherd's default fetcher is HTTP: a crawler
that made its fetcher itself (no ``fetcher=`` given) sends the requests that ask for a screenshot or
for page actions to a :class:`~crawlherd.fetch.browser.BrowserFetcher` with the same limits and the
same send gate, launched on the first such request and closed with the crawler; every other request
stays on HTTP. A crawler given a fetcher keeps to it (and says once when it cannot take screenshots).
"""

from __future__ import annotations

import asyncio

from crawlherd.fetch.actions import PAGE_META
from crawlherd.fetch.base import Fetcher, FetchLimits
from crawlherd.fetch.gate import SendGate
from crawlherd.request import Request

__all__ = ["Renderer", "wants_rendering"]


def wants_rendering(request: Request) -> bool:
    """``request`` asks for what only a browser does: a screenshot or page actions."""
    meta = request._meta  # noqa: SLF001 - not request.meta, which gives every request a dict of its own
    if not meta:
        return False
    return bool(meta.get("crawlherd.screenshot") or meta.get(PAGE_META))


class Renderer:
    """A :class:`~crawlherd.fetch.browser.BrowserFetcher` made on first need (:meth:`fetcher`) with
    ``limits``, passing ``gate``; :meth:`close` closes it if it was made."""

    def __init__(self, limits: FetchLimits) -> None:
        self.limits = limits
        self._fetcher: Fetcher | None = None
        self._lock = asyncio.Lock()

    async def fetcher(self, gate: SendGate | None) -> Fetcher:
        """The browser fetcher, started (BrowserUnavailableError when Playwright or Chromium is missing)."""
        async with self._lock:
            if self._fetcher is None:
                from crawlherd.fetch.browser import BrowserFetcher

                browser = BrowserFetcher(self.limits)
                browser.send_gate = gate
                await browser.__aenter__()
                self._fetcher = browser
            return self._fetcher

    async def close(self) -> None:
        fetcher, self._fetcher = self._fetcher, None
        if fetcher is not None:
            await fetcher.close()
