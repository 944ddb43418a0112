"""crawl4ai's dispatchers (``crawl4ai.async_dispatcher``).

The dispatchers are crawlherd's engine dispatchers: given to ``crawler.arun_many`` they run the URLs
through the crawler's frontier (one result per URL, 429/503 re-fetched after their back-off, memory
pressure holding and re-queueing work). :class:`MemoryAdaptiveDispatcher` also has crawl4ai's internals
for code that drives it directly: ``run_urls(urls, crawler, config)`` and ``run_urls_stream(...)``
(``CrawlerTaskResult`` objects), ``crawl_url(url, config, task_id, retry_count)`` (the one method a
subclass overrides to see or change each URL's work), ``concurrent_sessions`` and ``task_queue``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncGenerator, Iterable
from typing import Any
from urllib.parse import urlsplit

import psutil

from crawlherd.compat.crawl4ai.components.crawler_monitor import CrawlerMonitor, DisplayMode
from crawlherd.compat.crawl4ai.models import CrawlerTaskResult, CrawlStatus
from crawlherd.crawler.concurrency.base import BaseDispatcher
from crawlherd.crawler.concurrency.memory_adaptive import MemoryAdaptiveDispatcher as EngineMemoryAdaptive
from crawlherd.crawler.concurrency.rate_limiter import RateLimiter
from crawlherd.crawler.concurrency.semaphore import SemaphoreDispatcher as EngineSemaphore
from crawlherd.result import CrawlResult

__all__ = [
    "BaseDispatcher",
    "CrawlerMonitor",
    "DisplayMode",
    "MemoryAdaptiveDispatcher",
    "RateLimiter",
    "SemaphoreDispatcher",
]

_MB = 1024 * 1024


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / _MB


def _first_config(config: Any) -> Any:
    return config[0] if isinstance(config, list | tuple) and config else config


class SemaphoreDispatcher(EngineSemaphore):
    """crawl4ai's ``SemaphoreDispatcher(semaphore_count=5, max_session_permit=20, rate_limiter=None,
    monitor=None)``: at most ``semaphore_count`` URLs in flight. ``max_session_permit`` is kept for
    crawl4ai's signature; as in crawl4ai, ``semaphore_count`` is the bound."""

    def __init__(
        self,
        semaphore_count: int = 5,
        max_session_permit: int = 20,
        rate_limiter: RateLimiter | None = None,
        monitor: Any = None,
    ) -> None:
        super().__init__(semaphore_count, rate_limiter=rate_limiter, monitor=monitor)
        self.max_session_permit = max_session_permit


class MemoryAdaptiveDispatcher(EngineMemoryAdaptive):
    """crawl4ai's ``MemoryAdaptiveDispatcher(memory_threshold_percent=90, critical_threshold_percent=95,
    recovery_threshold_percent=None, check_interval=1.0, max_session_permit=20, memory_wait_timeout=600,
    rate_limiter=None, monitor=None)``: crawlherd's engine dispatcher (see
    :class:`crawlherd.crawler.concurrency.memory_adaptive.MemoryAdaptiveDispatcher`) with crawl4ai's
    internals (module docstring).

    Driven directly (``run_urls`` / ``run_urls_stream``), each URL is one ``crawl_url`` task and one
    :class:`~crawlherd.compat.crawl4ai.models.CrawlerTaskResult`, the URLs as given (no frontier:
    repeated URLs are fetched again); at most ``max_session_permit`` run at once, none starts while
    memory is above the threshold, and memory staying there past ``memory_wait_timeout`` raises
    :class:`~crawlherd.errors.MemoryPressureError` (a ``MemoryError``). A rate-limited answer is
    fetched again after the rate limiter's back-off, up to its ``max_retries``. Closing the stream
    cancels the tasks in flight and drops the URLs not started."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: URLs being fetched by ``crawl_url`` right now.
        self.concurrent_sessions = 0
        #: URLs waiting, as ``(priority, order, (url, task_id, retry_count, enqueue_time))``.
        self.task_queue: asyncio.PriorityQueue[tuple[int, int, tuple[str, str, int, float]]] = asyncio.PriorityQueue()
        self._order = itertools.count()

    async def run_urls(self, urls: Iterable[str], crawler: Any, config: Any = None) -> list[CrawlerTaskResult]:  # type: ignore[override]
        """Every URL's :class:`CrawlerTaskResult`, in completion order."""
        return [task async for task in self.run_urls_stream(urls, crawler, config)]

    async def run_urls_stream(
        self, urls: Iterable[str], crawler: Any, config: Any = None
    ) -> AsyncGenerator[CrawlerTaskResult, None]:
        """Each URL's :class:`CrawlerTaskResult` as it completes."""
        self.crawler = crawler
        monitor = self.monitor
        for url in urls:
            task_id = str(uuid.uuid4())
            if isinstance(monitor, CrawlerMonitor):
                monitor.add_task(task_id, url)
            self.task_queue.put_nowait((0, next(self._order), (url, task_id, 0, time.time())))
        if monitor is not None:
            monitor.start()
        running: set[asyncio.Task[CrawlerTaskResult]] = set()
        self.state = "normal"
        self._error = None
        self._pressure_since = None
        try:
            while running or not self.task_queue.empty():
                self.check_memory(time.monotonic())
                if self._error is not None:
                    raise self._error
                while self.state == "normal" and len(running) < self.max_session_permit and not self.task_queue.empty():
                    _, _, (url, task_id, retries, queued_at) = self.task_queue.get_nowait()
                    if isinstance(monitor, CrawlerMonitor):
                        monitor.update_task(task_id, wait_time=time.time() - queued_at)
                    running.add(asyncio.create_task(self.crawl_url(url, config, task_id, retries)))
                if not running:
                    await asyncio.sleep(self.check_interval)
                    continue
                done, running = await asyncio.wait(running, timeout=self.check_interval,
                                                   return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    yield task.result()
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            while not self.task_queue.empty():
                self.task_queue.get_nowait()
            if monitor is not None:
                await monitor.stop()

    async def crawl_url(self, url: str, config: Any, task_id: str, retry_count: int = 0) -> CrawlerTaskResult:
        """Fetch one URL with ``self.crawler.arun(url, config=config)`` (after the rate limiter's slot;
        a rate-limited answer is fetched again while the rate limiter allows): its task result. An
        exception of the crawler is a failed result, never raised."""
        config = _first_config(config)
        monitor = self.monitor if isinstance(self.monitor, CrawlerMonitor) else None
        start = time.time()
        mem_start = peak = _rss_mb()
        error = ""
        if monitor is not None:
            monitor.update_task(task_id, status=CrawlStatus.IN_PROGRESS, start_time=start, retry_count=retry_count)
        self.concurrent_sessions += 1
        try:
            result, retry_count, error = await self._fetch(url, config, retry_count)
            peak = max(peak, _rss_mb())
        except Exception as exc:  # noqa: BLE001 - one URL never aborts the batch
            error = f"{type(exc).__name__}: {exc}"
            result = CrawlResult(url=url, success=False, error_message=error, error_type=type(exc).__name__)
        finally:
            self.concurrent_sessions -= 1
        end = time.time()
        used = max(0.0, peak - mem_start)
        if monitor is not None:
            monitor.update_task(
                task_id, status=CrawlStatus.COMPLETED if result.success and not error else CrawlStatus.FAILED,
                end_time=end, memory_usage=used, peak_memory=used, error_message=error, retry_count=retry_count,
            )
        return CrawlerTaskResult(task_id, url, result, used, used, start, end, error, retry_count)

    async def _fetch(self, url: str, config: Any, retries: int) -> tuple[Any, int, str]:
        rl = self.rate_limiter
        while True:
            if rl is not None:
                await rl.wait_if_needed(url)
            result = await self.crawler.arun(url, config=config)
            status = getattr(result, "status_code", None)
            if rl is None or not status or status not in rl.rate_limit_codes:
                if rl is not None and status:
                    await rl.update_delay(url, status)
                break
            if not await rl.update_delay(url, status, (getattr(result, "headers", None) or {}).get("retry-after")):
                host = urlsplit(url).netloc
                return result, retries, f"rate limited by {host}: gave up after {retries} re-fetches"
            retries += 1
        error = "" if getattr(result, "success", False) else str(getattr(result, "error_message", "") or "")
        return result, retries, error
