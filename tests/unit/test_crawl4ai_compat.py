"""crawl4ai names and behaviours crawlherd accepts (issue 14): what the seed examples do not reach."""

from __future__ import annotations

import asyncio
import logging

import pytest

from crawlherd import (
    AsyncWebCrawler,
    BaseDispatcher,
    Crawler,
    CrawlerMonitor,
    CrawlerRunConfig,
    CrawlResult,
    DisplayMode,
    MemoryAdaptiveDispatcher,
    RateLimiter,
)
from crawlherd.clock import FakeClock
from crawlherd.errors import ConfigurationError
from crawlherd.fetch import MockFetcher, MockResponse

PAGE = (
    "<html><head><title>T</title><script>evil()</script><style>p{color:red}</style></head>"
    "<body onload='x()'><nav><a href='/menu'>Menu</a></nav><!-- hidden note -->"
    "<main><h1>Jobs</h1><p style='color:blue'>Read <a href='/job/1'>the first job</a> or "
    "<a href='https://other.example/b'>another</a>.</p><ul><li>one</li><li>two</li></ul></main>"
    "<footer>(c) us</footer></body></html>"
)


def html_result(body: str = PAGE, content_type: str = "text/html; charset=utf-8") -> CrawlResult:
    return CrawlResult(
        url="http://site.example/a/b", success=True, status_code=200, final_url="http://site.example/a/",
        headers={"content-type": content_type}, body=body.encode(),
    )


# -- CrawlResult: links, cleaned HTML, markdown, on first access -------------------------------------------


def test_markdown_is_the_main_content_with_absolute_links() -> None:
    result = html_result()
    assert result.markdown == (
        "# Jobs\n\nRead [the first job](http://site.example/job/1) or [another](https://other.example/b).\n\n"
        "- one\n- two\n"
    )


def test_cleaned_html_drops_what_a_reader_never_sees() -> None:
    cleaned = html_result().cleaned_html
    for gone in ("<script", "evil()", "<style", "hidden note", "onload", "style="):
        assert gone not in cleaned
    assert "<main><h1>Jobs</h1>" in cleaned and "<footer>(c) us</footer>" in cleaned


def test_html_is_the_page_as_fetched() -> None:
    assert html_result().html == PAGE


def test_links_internal_and_external() -> None:
    result = html_result()
    assert result.links == ["http://site.example/menu", "http://site.example/job/1", "https://other.example/b"]
    assert result.internal_links == ["http://site.example/menu", "http://site.example/job/1"]
    assert result.external_links == ["https://other.example/b"]


def test_readings_are_computed_once_and_only_when_asked() -> None:
    result = html_result()
    assert result.links_found is None and result._markdown is None and result._cleaned_html is None
    assert "links" not in result.to_dict()
    first = result.markdown
    assert result.markdown is first  # kept, not recomputed
    assert result.links_found is None  # markdown did not compute the links


def test_a_page_that_is_not_html_reads_empty() -> None:
    result = html_result('{"a": "<b>"}', "application/json")
    assert (result.markdown, result.cleaned_html, result.links) == ("", "", [])


async def test_a_crawl_does_not_compute_markdown() -> None:
    fetcher = MockFetcher(lambda request: MockResponse(200, PAGE.encode(), content_type="text/html"))
    async with Crawler(fetcher=fetcher) as crawler:
        [result] = await crawler.arun_many(urls=["http://site.example/"])
    assert result._markdown is None and result._cleaned_html is None
    assert result.markdown.startswith("# Jobs")


# -- AsyncWebCrawler, arun_many(urls=) ----------------------------------------------------------------------


async def test_async_web_crawler_is_the_crawler_and_takes_urls_keyword() -> None:
    assert AsyncWebCrawler is Crawler
    fetcher = MockFetcher(lambda request: MockResponse(200, b"<html>x</html>", content_type="text/html"))
    async with AsyncWebCrawler(fetcher=fetcher) as crawler:
        results = await crawler.arun_many(urls=["http://a.example/", "http://b.example/"])
        with pytest.raises(ConfigurationError, match="pass the URLs once, positionally or as urls=, not both"):
            await crawler.arun_many(["http://a.example/"], urls=["http://a.example/"])
        with pytest.raises(ConfigurationError, match=r"arun_many needs the URLs: arun_many\(\[...\]\)"):
            await crawler.arun_many()
    assert sorted(r.url for r in results) == ["http://a.example/", "http://b.example/"]


async def test_custom_dispatcher_returning_something_else_is_told() -> None:
    class Odd(BaseDispatcher):
        async def run_urls(self, urls, crawler, config):  # type: ignore[no-untyped-def]
            return ["not a result" for _ in urls]

    fetcher = MockFetcher(lambda request: MockResponse(200, b"x"))
    async with Crawler(fetcher=fetcher) as crawler:
        with pytest.raises(ConfigurationError, match="a custom dispatcher's run_urls returned str"):
            await crawler.arun_many(urls=["http://a.example/"], dispatcher=Odd())


async def test_base_dispatcher_run_urls_runs_crawlherds_own() -> None:
    from crawlherd import SemaphoreDispatcher

    fetcher = MockFetcher(lambda request: MockResponse(200, b"x"))
    async with Crawler(fetcher=fetcher) as crawler:
        results = await SemaphoreDispatcher(2).run_urls(["http://a.example/", "http://b.example/"], crawler)
    assert sorted(r.url for r in results) == ["http://a.example/", "http://b.example/"]


async def test_screenshot_with_a_fetcher_that_cannot_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    fetcher = MockFetcher(lambda request: MockResponse(200, b"x"))
    config = CrawlerRunConfig(screenshot=True)
    async with Crawler(fetcher=fetcher) as crawler:
        with caplog.at_level(logging.WARNING, logger="crawlherd.crawler"):
            [result] = await crawler.arun_many(["http://a.example/"], config=config)
            await crawler.arun("http://a.example/", config=config)
    assert result.success and result.screenshot is None
    assert [r.getMessage() for r in caplog.records] == [
        "CrawlerRunConfig(screenshot=True): MockFetcher does not render pages and cannot take screenshots; "
        "results will have screenshot=None. Use Crawler(fetcher=BrowserFetcher()) "
        "(pip install 'crawlherd[browser]') for screenshots."
    ]


def test_browser_fetcher_says_it_takes_screenshots() -> None:
    pytest.importorskip("playwright")
    from crawlherd import BrowserFetcher

    assert BrowserFetcher.takes_screenshots is True


# -- MemoryAdaptiveDispatcher --------------------------------------------------------------------------------


def test_threshold_85_works_and_recovery_is_derived() -> None:
    d = MemoryAdaptiveDispatcher(memory_threshold_percent=85.0, memory_reader=lambda: 1.0)
    assert d.recovery_threshold_percent == 80.0
    assert MemoryAdaptiveDispatcher(memory_reader=lambda: 1.0).recovery_threshold_percent == 85.0
    same = MemoryAdaptiveDispatcher(memory_threshold_percent=85, recovery_threshold_percent=85, memory_reader=int)
    assert same.recovery_threshold_percent == 85


def test_recovery_happens_at_the_recovery_threshold() -> None:
    readings = iter([91.0, 85.0])
    d = MemoryAdaptiveDispatcher(memory_reader=lambda: next(readings))
    assert d.memory_pressure_mode is False and d.current_memory_percent == 0.0
    assert d.check_memory(0.0) == "pressure" and d.memory_pressure_mode
    assert d.check_memory(0.0) == "normal"  # 85 <= recovery 85: recovered, as crawl4ai does
    assert d.memory_pressure_mode is False and d.current_memory_percent == 85.0


# -- CrawlerMonitor -------------------------------------------------------------------------------------------


def test_monitor_accepts_crawl4ai_options() -> None:
    m = CrawlerMonitor(max_visible_rows=2, display_mode=DisplayMode.DETAILED, enable_ui=False)
    for i in range(3):
        m.add_queued()
        m.task_started()
        m.task_finished(CrawlResult(url=f"http://a.example/{i}", success=True, status_code=200))
    assert [row.url for row in m.recent or ()] == ["http://a.example/1", "http://a.example/2"]
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(m.render())
    text = console.export_text()
    assert "http://a.example/2" in text and "http://a.example/0" not in text
    aggregated = CrawlerMonitor(display_mode="aggregated", enable_ui=False)
    assert aggregated.display_mode is DisplayMode.AGGREGATED and aggregated.recent is None
    with pytest.raises(ValueError, match="display_mode='wide': use DisplayMode.DETAILED or DisplayMode.AGGREGATED"):
        CrawlerMonitor(display_mode="wide")
    with pytest.raises(ValueError, match="max_visible_rows=0: must be an int >= 1"):
        CrawlerMonitor(max_visible_rows=0)


def test_statistics_have_crawl4ais_memory_names_in_mb() -> None:
    m = CrawlerMonitor(enable_ui=False)
    m.record_memory(300 * 1024 * 1024)
    m.record_memory(100 * 1024 * 1024)
    stats = m.get_statistics()
    assert stats["avg_memory_usage"] == 200.0 and stats["avg_memory"] == 200 * 1024 * 1024
    assert stats["peak_memory_usage"] >= 300.0


# -- RateLimiter ------------------------------------------------------------------------------------------------


async def test_wait_if_needed_spaces_a_domain() -> None:
    clock = FakeClock()
    limiter = RateLimiter(base_delay=(2.0, 2.0), clock=clock)
    await limiter.wait_if_needed("https://example.com/a")  # first: at once
    second = asyncio.ensure_future(limiter.wait_if_needed("https://example.com/b"))
    other = asyncio.ensure_future(limiter.wait_if_needed("https://example.org/"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert other.done() and not second.done()  # another domain is not held
    clock.advance(1.9)
    await asyncio.sleep(0)
    assert not second.done()
    clock.advance(0.2)
    await asyncio.wait_for(second, 1)


async def test_update_delay_backs_off_then_gives_up() -> None:
    limiter = RateLimiter(base_delay=(0.0, 0.0), max_retries=2, clock=FakeClock())
    assert await limiter.update_delay("https://example.com/x", 200) is True
    assert await limiter.update_delay("https://example.com/x", 429, "5") is True
    assert limiter.delay_of("example.com") == 5.0
    assert await limiter.update_delay("https://example.com/x", 429) is True
    assert await limiter.update_delay("https://example.com/x", 429) is False  # max_retries used up
