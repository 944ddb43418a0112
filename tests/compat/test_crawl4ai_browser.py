"""``AsyncWebCrawler(config=BrowserConfig(...))`` renders with the system Chromium, at the viewport
asked for."""

from __future__ import annotations

from crawlherd.compat.crawl4ai import AsyncWebCrawler, BrowserConfig, CrawlerRunConfig
from crawlherd.fetch.browser import BrowserFetcher
from tests.compat.conftest import Site


async def test_browser_config_means_chromium_at_its_viewport(site: Site, chromium: str) -> None:
    config = BrowserConfig(headless=True, verbose=False, viewport_width=1024, viewport_height=768)
    async with AsyncWebCrawler(config=config, allow_private_addresses=True) as crawler:
        assert isinstance(crawler.fetcher, BrowserFetcher)
        results = await crawler.arun_many([site.url + "/viewport", site.urls[1]],
                                          config=CrawlerRunConfig(page_timeout=30000, verbose=False))
    assert all(r.success for r in results)
    (rendered,) = [r for r in results if r.url.endswith("/viewport")]
    assert "width=1024" in rendered.html
