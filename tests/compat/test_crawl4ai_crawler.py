"""crawl4ai's ``AsyncWebCrawler.arun_many`` rules on crawlherd: its default dispatcher, a list of
configs, crawlherd's dispatchers through the frontier, a dispatcher that runs the URLs itself, memory
pressure, rate limits, the monitor, markdown."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from crawlherd.compat.crawl4ai import (
    AsyncWebCrawler,
    CacheMode,
    CrawlerMonitor,
    CrawlerRunConfig,
    CrawlerTaskResult,
    CrawlResult,
    DefaultMarkdownGenerator,
    DisplayMode,
    MarkdownGenerationResult,
    MemoryAdaptiveDispatcher,
    PruningContentFilter,
    RateLimiter,
    SemaphoreDispatcher,
)
from crawlherd.errors import ConfigurationError
from tests.compat.conftest import Site

QUIET = CrawlerRunConfig(cache_mode=CacheMode.BYPASS, verbose=False)


class Recorded(MemoryAdaptiveDispatcher):
    """Keeps every instance made, so that a test can see the dispatcher arun_many chose."""

    made: list[Recorded] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        Recorded.made.append(self)


async def test_default_dispatcher_takes_the_first_configs_delays(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("crawlherd.compat.crawl4ai.async_webcrawler.MemoryAdaptiveDispatcher", Recorded)
    Recorded.made.clear()
    first = CrawlerRunConfig(mean_delay=0.01, max_range=0.02, semaphore_count=3, verbose=False)
    second = CrawlerRunConfig(mean_delay=5.0, max_range=2.0, verbose=False)
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        results = await crawler.arun_many(urls=site.urls[:2], config=[first, second])
    assert [r.success for r in results] == [True, True]
    (dispatcher,) = Recorded.made
    assert dispatcher.rate_limiter is not None
    assert dispatcher.rate_limiter.base_delay == (0.01, 0.03)
    assert dispatcher.max_session_permit == 3


async def test_crawlherd_dispatchers_run_through_the_frontier(site: Site) -> None:
    urls = [site.urls[0], site.urls[0] + "/page1", site.urls[1], site.urls[0]]
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        for dispatcher in (MemoryAdaptiveDispatcher(max_session_permit=2, check_interval=0.1),
                           SemaphoreDispatcher(semaphore_count=2, rate_limiter=RateLimiter(base_delay=(0.0, 0.01)))):
            results = await crawler.arun_many(urls, config=QUIET, dispatcher=dispatcher)
            assert len(results) == 4 and all(r.success for r in results)
        assert await crawler.arun_many([], config=QUIET, dispatcher=MemoryAdaptiveDispatcher()) == []
        (bad,) = await crawler.arun_many(["http://invalid.invalid/"], config=QUIET)
        assert not bad.success
    assert site.hits["/"] == 4  # one fetch per distinct URL and run, the repeat answered from it


async def test_a_dispatcher_that_runs_the_urls_itself(site: Site) -> None:
    class Own:
        """A dispatcher as crawl4ai documents one: it runs the URLs itself."""

        def __init__(self) -> None:
            self.calls: list[tuple[Any, list[str], Any]] = []

        async def run_urls(self, urls: list[str], crawler: Any, config: Any) -> list[CrawlerTaskResult]:
            self.calls.append((crawler, urls, config))
            tasks = []
            for i, url in enumerate(urls):
                result = await crawler.arun(url, config=config)
                tasks.append(CrawlerTaskResult(f"t{i}", url, result, 1.0, 2.0, 10.0, 11.0))
            return tasks

    own = Own()
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        results = await crawler.arun_many(site.urls[:2], config=QUIET, dispatcher=own)
    ((called_with, urls, config),) = own.calls
    assert called_with is crawler and urls == site.urls[:2] and config is QUIET
    assert [r.url for r in results] == site.urls[:2]
    assert all(isinstance(r, CrawlResult) and r.success for r in results)
    assert [(r.dispatch.task_id, r.dispatch.start_time, r.dispatch.end_time) for r in results if r.dispatch] == [
        (1, 10.0, 11.0), (2, 10.0, 11.0)
    ]


async def test_memory_pressure_past_its_timeout_is_a_memory_error(site: Site) -> None:
    dispatcher = MemoryAdaptiveDispatcher(memory_threshold_percent=1.0, max_session_permit=2, check_interval=0.05,
                                          memory_wait_timeout=0.2, memory_reader=lambda: 50.0)
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        with pytest.raises(MemoryError, match="memory_wait_timeout"):
            await crawler.arun_many(site.urls, config=QUIET, dispatcher=dispatcher)


async def test_rate_limited_answers_are_fetched_again_then_fail(site: Site) -> None:
    limiter = RateLimiter(base_delay=(0.0, 0.0), max_delay=0.2, max_retries=2, backoff_base=0.01)
    dispatcher = MemoryAdaptiveDispatcher(max_session_permit=2, rate_limiter=limiter)
    urls = [site.url + "/limited"] * 3
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        results = await crawler.arun_many(urls, config=QUIET, dispatcher=dispatcher)
    assert len(results) == 3 and not any(r.success for r in results)
    assert {r.error_type for r in results} == {"RateLimitedError"}
    assert site.hits["/limited"] == 3  # the first answer and max_retries re-fetches


async def test_the_monitor_sees_every_task(site: Site) -> None:
    monitor = CrawlerMonitor(max_visible_rows=5, display_mode=DisplayMode.DETAILED, enable_ui=False)
    dispatcher = MemoryAdaptiveDispatcher(max_session_permit=2, monitor=monitor)
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        results = await crawler.arun_many(site.urls, config=QUIET, dispatcher=dispatcher)
    assert len(results) == 3
    assert len(monitor.stats) == 3
    assert all(task.end_time is not None and task.status.name == "COMPLETED" for task in monitor.stats.values())
    assert monitor.get_statistics()["completed"] == 3


async def test_streaming_and_markdown(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    generator = DefaultMarkdownGenerator(
        content_filter=PruningContentFilter(threshold=0.48, threshold_type="fixed", min_word_threshold=0)
    )
    config = CrawlerRunConfig(cache_mode=CacheMode.BYPASS, markdown_generator=generator)
    caplog.set_level(logging.INFO, "crawlherd.compat.crawl4ai")
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        streamed = [r async for r in await crawler.arun_many(urls=site.urls * 2, config=config.clone(stream=True))]
        batch = await crawler.arun_many(urls=site.urls, config=config)
    assert len(streamed) == 6 and len(batch) == 3
    markdown = batch[0].markdown
    assert isinstance(markdown, MarkdownGenerationResult)
    assert markdown.raw_markdown.startswith("Home") or "Example Domain" in markdown.raw_markdown
    assert "Privacy" in markdown.raw_markdown and "Privacy" not in markdown.fit_markdown
    assert "# Example Domain" in markdown.fit_markdown
    assert "more information⟨" in markdown.markdown_with_citations
    assert "https://www.iana.org/domains/example" in markdown.references_markdown
    assert sum("[FETCH] ok 200" in r.getMessage() for r in caplog.records) == 6


async def test_arun_refuses_crawl4ai_keywords_it_cannot_honour(site: Site) -> None:
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        with pytest.raises(ConfigurationError, match="session_id"):
            await crawler.arun(site.url, config=QUIET, session_id="s1")
        with pytest.raises(ConfigurationError, match="crawler_strategy"):
            AsyncWebCrawler(crawler_strategy=object())
