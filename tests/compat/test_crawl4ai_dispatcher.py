"""crawl4ai's dispatcher internals on crawlherd's MemoryAdaptiveDispatcher: ``run_urls_stream``,
``crawl_url(url, config, task_id, retry_count)``, ``concurrent_sessions``, ``task_queue``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from crawlherd.compat.crawl4ai import (
    AsyncWebCrawler,
    CrawlerMonitor,
    CrawlerRunConfig,
    CrawlerTaskResult,
    MemoryAdaptiveDispatcher,
    RateLimiter,
)
from tests.compat.conftest import Site

QUIET = CrawlerRunConfig(verbose=False)


class Blocking:
    """A crawler whose ``fast`` URL answers at once and whose other URLs never answer."""

    async def arun(self, url: str, config: Any = None) -> Any:
        if url == "fast":
            return SimpleNamespace(success=True, status_code=200, error_message="")
        await asyncio.Event().wait()


class Tracking(MemoryAdaptiveDispatcher):
    """Sees each URL's task through the crawl_url a subclass overrides."""

    def __init__(self) -> None:
        super().__init__(max_session_permit=3, check_interval=0.05)
        self.tasks: dict[str, asyncio.Task[Any]] = {}

    async def crawl_url(self, url: str, config: Any, task_id: str, retry_count: int = 0) -> CrawlerTaskResult:
        task = asyncio.current_task()
        assert task is not None
        self.tasks[url] = task
        return await super().crawl_url(url, config, task_id, retry_count)


async def test_closing_the_stream_cancels_the_work_in_flight() -> None:
    dispatcher = Tracking()
    stream = dispatcher.run_urls_stream(["fast", "blocked-1", "blocked-2", "queued"], Blocking(), QUIET)
    first = await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert first.url == "fast" and first.success
    await asyncio.wait_for(stream.aclose(), timeout=5)
    assert set(dispatcher.tasks) == {"fast", "blocked-1", "blocked-2"}  # "queued" never started: 3 at once
    assert all(task.done() for task in dispatcher.tasks.values())
    assert dispatcher.tasks["blocked-1"].cancelled() and dispatcher.tasks["blocked-2"].cancelled()
    assert dispatcher.concurrent_sessions == 0
    assert dispatcher.task_queue.empty()


async def test_run_urls_stream_with_a_crawler(site: Site) -> None:
    monitor = CrawlerMonitor(urls_total=4, enable_ui=False)
    dispatcher = MemoryAdaptiveDispatcher(max_session_permit=2, check_interval=0.05, monitor=monitor)
    urls = [site.url] * 3 + [site.urls[1]]
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        tasks = [t async for t in dispatcher.run_urls_stream(urls, crawler, QUIET)]
    assert len(tasks) == 4 and all(t.result.success and t.end_time >= t.start_time for t in tasks)
    assert len({t.task_id for t in tasks}) == 4
    assert site.hits["/"] == 4  # driven directly, the URLs are fetched as given (no frontier)
    summary = monitor.get_summary()
    assert (summary["completed"], summary["queued"], summary["progress"]) == (4, 0, 100.0)


async def test_crawl_url_fetches_a_rate_limited_url_again(site: Site) -> None:
    limiter = RateLimiter(base_delay=(0.0, 0.0), max_delay=0.1, max_retries=2, backoff_base=0.01)
    dispatcher = MemoryAdaptiveDispatcher(rate_limiter=limiter)
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        (task,) = await dispatcher.run_urls([site.url + "/limited"], crawler, QUIET)
    assert site.hits["/limited"] == 3
    assert task.retry_count == 2 and "gave up" in task.error_message and not task.result.success


async def test_a_crawler_error_is_a_failed_task() -> None:
    class Broken:
        async def arun(self, url: str, config: Any = None) -> Any:
            raise RuntimeError("boom")

    (task,) = await MemoryAdaptiveDispatcher().run_urls(["http://x.test/"], Broken(), QUIET)
    assert not task.success and task.error_message == "RuntimeError: boom"
