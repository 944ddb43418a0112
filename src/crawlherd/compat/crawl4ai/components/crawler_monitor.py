"""crawl4ai's ``CrawlerMonitor`` (``crawl4ai.components.crawler_monitor``), both constructors.

crawl4ai's current one -- ``CrawlerMonitor(urls_total=0, refresh_rate=1.0, enable_ui=True,
max_width=120)`` with a task API (``add_task``, ``update_task``, ``get_task_stats``,
``update_queue_statistics``, ``update_memory_status``, ``get_summary``) that threads may call -- and
its earlier one, ``CrawlerMonitor(max_visible_rows=15, display_mode=DisplayMode.DETAILED)``, which is
crawlherd's engine monitor (:class:`crawlherd.crawler.concurrency.monitor.CrawlerMonitor`). This class
is that engine monitor with the task API on top: attached to a dispatcher it is fed as the engine's
is, and every URL the dispatcher finishes is also a task in :attr:`stats`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator
from typing import Any

from crawlherd.compat.crawl4ai.models import CrawlStats, CrawlStatus
from crawlherd.crawler.concurrency.monitor import CrawlerMonitor as EngineMonitor
from crawlherd.crawler.concurrency.monitor import DisplayMode
from crawlherd.result import CrawlResult

__all__ = ["CrawlerMonitor", "DisplayMode"]

_MB = 1024 * 1024
_MEMORY_STATUSES = ("NORMAL", "PRESSURE", "CRITICAL")


class _Stopped:
    """What :meth:`CrawlerMonitor.stop` returns: nothing to wait for, but awaitable, so that the
    engine's ``await monitor.stop()`` and crawl4ai's ``monitor.stop()`` both work."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


class CrawlerMonitor(EngineMonitor):
    """``CrawlerMonitor(urls_total=0, refresh_rate=1.0, enable_ui=True, max_width=120, *,
    max_visible_rows=15, display_mode=DisplayMode.DETAILED, ...)``.

    ``refresh_rate``: seconds between redraws of the live view. ``enable_ui``: True shows the live
    view when stderr is a terminal (crawlherd never draws into a file or a pipe), False never.
    ``max_width``: the view's width in columns. ``urls_total``: the URLs expected, for
    :meth:`get_summary`'s progress. The other keywords are the engine monitor's.

    :meth:`start` and :meth:`stop` work inside an event loop and outside one (threads calling the task
    API, as crawl4ai's own tests do); the task API is thread-safe."""

    def __init__(
        self,
        urls_total: int = 0,
        refresh_rate: float = 1.0,
        enable_ui: bool = True,
        max_width: int = 120,
        **engine_options: Any,
    ) -> None:
        if refresh_rate <= 0:
            raise ValueError(f"refresh_rate={refresh_rate!r}: must be > 0 seconds")
        if not isinstance(urls_total, int) or urls_total < 0:
            raise ValueError(f"urls_total={urls_total!r}: must be an int >= 0")
        engine_options.setdefault("refresh_per_second", 1.0 / refresh_rate)
        engine_options.setdefault("enable_ui", None if enable_ui else False)
        super().__init__(**engine_options)
        self.urls_total = urls_total
        self.refresh_rate = refresh_rate
        self.max_width = max_width
        #: Every task, by id (crawl4ai's ``monitor.stats``).
        self.stats: dict[str, CrawlStats] = {}
        self.memory_status = "NORMAL"
        self.queue_stats: dict[str, float] = {"total_queued": 0, "highest_wait_time": 0.0, "avg_wait_time": 0.0}
        self.is_running = False
        self._lock = threading.Lock()
        self._thread_live: Any = None

    # -- running ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the clock and, when wanted, the live view -- in an event loop or outside one."""
        self.is_running = True
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._start_without_loop()
            return
        super().start()

    def _start_without_loop(self) -> None:
        if self._started_at is None:
            self._started_at = time.perf_counter()
        self._stopped_at = None
        if self._thread_live is None and self._ui_wanted():
            from rich.console import Console
            from rich.live import Live

            console = self._console or Console(stderr=True, width=self.max_width)
            self._thread_live = Live(get_renderable=self.render, console=console,
                                     refresh_per_second=1.0 / self.refresh_rate)
            self._thread_live.start()

    def stop(self) -> _Stopped:  # type: ignore[override]
        """Stop the clock and the live view. Returns at once; ``await monitor.stop()`` works too."""
        self.is_running = False
        self._stopped_at = time.perf_counter()
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.cancel()
        for live in (self._live, self._thread_live):
            if live is not None:
                live.update(self.render())
                live.stop()
        self._live = self._thread_live = None
        return _Stopped()

    # -- the engine's hook -------------------------------------------------------------------------

    def task_finished(self, result: CrawlResult) -> None:
        super().task_finished(result)
        info = result.dispatch
        task_id = str(info.task_id) if info is not None else result.url
        with self._lock:
            self.stats[task_id] = CrawlStats(
                task_id=task_id,
                url=result.url,
                status=CrawlStatus.COMPLETED if result.success else CrawlStatus.FAILED,
                start_time=info.start_time if info is not None else None,
                end_time=info.end_time if info is not None else time.time(),
                memory_usage=(info.memory_at_end - info.memory_at_start) / _MB if info is not None else 0.0,
                peak_memory=info.peak_memory / _MB if info is not None else 0.0,
                error_message=result.error_message or "",
                retry_count=info.retries if info is not None else 0,
            )

    # -- crawl4ai's task API -------------------------------------------------------------------------

    def add_task(self, task_id: str, url: str) -> None:
        """A URL waiting to be crawled."""
        with self._lock:
            self.stats[task_id] = CrawlStats(task_id=task_id, url=url, enqueue_time=time.time())
            self.queued += 1

    def update_task(
        self,
        task_id: str,
        status: CrawlStatus | None = None,
        start_time: float | None = None,
        end_time: float | None = None,
        memory_usage: float | None = None,
        peak_memory: float | None = None,
        error_message: str | None = None,
        retry_count: int | None = None,
        wait_time: float | None = None,
    ) -> None:
        """Change what is known of a task (None: unchanged); a change of ``status`` moves the counters."""
        with self._lock:
            task = self.stats.get(task_id)
            if task is None:
                raise KeyError(f"no task {task_id!r}: add_task() it first")
            if status is not None and status is not task.status:
                self._move(task.status, status)
                task.status = status
            for name, value in (("start_time", start_time), ("end_time", end_time), ("memory_usage", memory_usage),
                                ("peak_memory", peak_memory), ("error_message", error_message),
                                ("retry_count", retry_count), ("wait_time", wait_time)):
                if value is not None:
                    setattr(task, name, value)

    def _move(self, old: CrawlStatus, new: CrawlStatus) -> None:
        if old is CrawlStatus.QUEUED:
            self.queued -= 1
        elif old is CrawlStatus.IN_PROGRESS:
            self.in_flight -= 1
        elif old is CrawlStatus.COMPLETED:
            self.completed -= 1
        else:
            self.failed -= 1
        if new is CrawlStatus.QUEUED:
            self.queued += 1
        elif new is CrawlStatus.IN_PROGRESS:
            self.in_flight += 1
            if self._started_at is None:
                self._started_at = time.perf_counter()
        elif new is CrawlStatus.COMPLETED:
            self.completed += 1
        else:
            self.failed += 1

    def get_task_stats(self, task_id: str) -> dict[str, Any]:
        """A task as a dict (``status`` is the status's name); ``{}`` for an unknown id."""
        with self._lock:
            task = self.stats.get(task_id)
            return task.as_dict() if task is not None else {}

    def get_all_task_stats(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {task_id: task.as_dict() for task_id, task in self.stats.items()}

    def update_memory_status(self, status: str) -> None:
        """``NORMAL``, ``PRESSURE`` or ``CRITICAL``, as the dispatcher sees memory."""
        if status not in _MEMORY_STATUSES:
            raise ValueError(f"memory status {status!r}: use one of {_MEMORY_STATUSES}")
        self.memory_status = status

    def get_memory_status(self) -> str:
        return self.memory_status

    def update_queue_statistics(self, total_queued: int, highest_wait_time: float, avg_wait_time: float) -> None:
        self.queue_stats = {
            "total_queued": total_queued, "highest_wait_time": highest_wait_time, "avg_wait_time": avg_wait_time,
        }

    def get_queue_stats(self) -> dict[str, float]:
        return dict(self.queue_stats)

    def get_summary(self) -> dict[str, Any]:
        """Totals: ``urls_total``, ``completed``, ``failed``, ``in_progress``, ``queued``, ``progress``
        (percent of ``urls_total``), ``memory_status``, ``peak_memory`` (MB, the largest of a task),
        ``elapsed`` seconds."""
        stats = self.get_statistics()
        with self._lock:
            peak = max((t.peak_memory for t in self.stats.values()), default=0.0)
        done = stats["completed"] + stats["failed"]
        return {
            "urls_total": self.urls_total,
            "completed": stats["completed"],
            "failed": stats["failed"],
            "in_progress": stats["in_flight"],
            "queued": stats["queued"],
            "progress": 100.0 * done / self.urls_total if self.urls_total else 0.0,
            "memory_status": self.memory_status,
            "peak_memory": peak,
            "elapsed": stats["elapsed"],
        }
