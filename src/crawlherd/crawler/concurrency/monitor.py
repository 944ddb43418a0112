"""``CrawlerMonitor``: counters a dispatcher feeds as it runs, a statistics snapshot, and a live
terminal view (rich) that is shown only when the output is a terminal.

The hot-path hooks (:meth:`task_started`, :meth:`task_finished`) only bump counters; the view is
redrawn from a timer, never per page.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from crawlherd._aio import cancel_and_wait
from crawlherd.crawler.concurrency.memory_usage import ProcessMemory, SystemMemory
from crawlherd.result import CrawlResult, DispatchInfo

__all__ = ["CrawlerMonitor", "DisplayMode"]

_MB = 1024 * 1024


class DisplayMode(enum.Enum):
    """What the live view shows (crawl4ai's names): ``DETAILED``, the totals and one row per recent
    URL (at most ``max_visible_rows``); ``AGGREGATED``, the totals only."""

    DETAILED = "DETAILED"
    AGGREGATED = "AGGREGATED"


class _Row(NamedTuple):
    url: str
    status: str
    duration: float
    memory: int


class CrawlerMonitor:
    """``CrawlerMonitor(*, max_visible_rows=15, display_mode=DisplayMode.DETAILED, enable_ui=None,
    refresh_per_second=4, console=None, concurrency=None)``.

    Attach it to a dispatcher (``SemaphoreDispatcher(monitor=CrawlerMonitor())``). ``enable_ui``: None
    shows the live view only when stdout is a terminal; True/False force it. ``display_mode`` and
    ``max_visible_rows`` are crawl4ai's: the detailed view lists the last ``max_visible_rows`` URLs
    finished. Statistics are available at any time through :meth:`get_statistics`.
    """

    def __init__(
        self,
        *,
        max_visible_rows: int = 15,
        display_mode: DisplayMode | str = DisplayMode.DETAILED,
        enable_ui: bool | None = None,
        refresh_per_second: float = 4.0,
        console: Any = None,
        concurrency: int | None = None,
        memory: ProcessMemory | None = None,
        system_memory: Callable[[], float] | None = None,
    ) -> None:
        if refresh_per_second <= 0:
            raise ValueError(f"refresh_per_second={refresh_per_second!r}: must be > 0")
        if not isinstance(max_visible_rows, int) or max_visible_rows < 1:
            raise ValueError(f"max_visible_rows={max_visible_rows!r}: must be an int >= 1")
        try:
            self.display_mode = DisplayMode(display_mode.value if isinstance(display_mode, DisplayMode) else
                                            str(display_mode).upper())
        except ValueError:
            raise ValueError(
                f"display_mode={display_mode!r}: use DisplayMode.DETAILED or DisplayMode.AGGREGATED"
            ) from None
        self.max_visible_rows = max_visible_rows
        # The last URLs finished, newest last (kept only for the detailed view): (url, status key,
        # dispatch record) per page -- the display rows are made only when someone looks (``recent``).
        self._recent: deque[tuple[str, int | str, DispatchInfo | None]] | None = (
            deque(maxlen=max_visible_rows) if self.display_mode is DisplayMode.DETAILED else None
        )
        self._enable_ui = enable_ui
        self._refresh = refresh_per_second
        self._console = console
        self.concurrency = concurrency
        self.memory = memory or ProcessMemory()
        #: Memory in use in percent of the container's limit or the machine (sampled by the timer).
        self.system_memory: Callable[[], float] = system_memory or SystemMemory()
        self.memory_percent: float | None = None
        self.completed = 0
        self.failed = 0
        self.retried = 0
        self.requeued = 0
        self.in_flight = 0
        self.queued = 0
        self._status: dict[int | str, int] = {}
        self._domains: dict[str, int] = {}
        self._duration_sum = 0.0
        self._mem_sum = 0
        self._mem_n = 0
        self._mem_peak = 0
        self._started_at: float | None = None
        self._stopped_at: float | None = None
        self._live: Any = None
        self._ticker: asyncio.Task[None] | None = None

    # -- hooks the dispatcher calls --------------------------------------------------------------

    def add_queued(self, n: int = 1) -> None:
        """``n`` more URLs are waiting."""
        self.queued += n

    def task_started(self) -> None:
        if self._started_at is None:
            self._started_at = time.perf_counter()
        self.queued -= 1
        self.in_flight += 1

    def task_finished(self, result: CrawlResult) -> None:
        self.in_flight -= 1
        if result.success:
            self.completed += 1
        else:
            self.failed += 1
        code = result.status_code
        key: int | str = code if code is not None else "error"
        counts = self._status
        counts[key] = counts.get(key, 0) + 1
        req = result.request
        if req is not None:
            domains = self._domains
            host = req.host
            domains[host] = domains.get(host, 0) + 1
        info = result.dispatch
        recent = self._recent
        if recent is not None:
            recent.append((result.url, key, info))
        if info is not None:
            self._duration_sum += info.end_time - info.start_time
            mem = info.memory_at_end
            if mem:
                self._mem_sum += mem
                self._mem_n += 1
                if info.peak_memory > self._mem_peak:
                    self._mem_peak = info.peak_memory

    @property
    def recent(self) -> list[_Row] | None:
        """The last URLs finished, newest last (None unless the display mode is DETAILED)."""
        if self._recent is None:
            return None
        return [
            _Row(url, str(key), info.duration if info else 0.0, info.memory_at_end if info else 0)
            for url, key, info in self._recent
        ]

    @property
    def status_counts(self) -> dict[int | str, int]:
        """Results per HTTP status (``"error"``: no response)."""
        return dict(self._status)

    @property
    def domain_counts(self) -> dict[str, int]:
        """Results per host."""
        return dict(self._domains)

    def task_retried(self) -> None:
        """A URL went back to the queue for a re-fetch (rate limited)."""
        self.in_flight -= 1
        self.queued += 1
        self.retried += 1

    def task_requeued(self) -> None:
        """A URL in flight went back to the queue (memory pressure); in_flight and queued were
        already adjusted when its work was cancelled."""
        self.requeued += 1

    def record_memory(self, rss: int) -> None:
        self._mem_sum += rss
        self._mem_n += 1
        if rss > self._mem_peak:
            self._mem_peak = rss

    # -- statistics ---------------------------------------------------------------------------------

    def get_statistics(self) -> dict[str, Any]:
        """A snapshot: completed, failed, retried, requeued, in_flight, queued, total, elapsed,
        pages_per_second, status_counts, domain_counts, avg_memory, peak_memory (bytes, this process),
        avg_memory_usage and peak_memory_usage (the same in MB, crawl4ai's names),
        memory_percent (of the container's limit or the machine; None before the first sample), avg_duration
        and eta_seconds (None until it can be estimated)."""
        start = self._started_at
        end = self._stopped_at or time.perf_counter()
        elapsed = 0.0 if start is None else end - start
        done = self.completed + self.failed
        rate = done / elapsed if elapsed > 0 else 0.0
        avg_duration = self._duration_sum / done if done else None
        remaining = max(0, self.queued) + self.in_flight
        eta: float | None = None
        if remaining == 0:
            eta = 0.0 if done else None
        elif rate > 0 and elapsed >= 1.0:
            eta = remaining / rate  # observed throughput already reflects the concurrency
        elif avg_duration is not None:
            lanes = max(1, self.concurrency or self.in_flight or 1)
            eta = avg_duration * remaining / min(lanes, remaining)
        avg_memory = self._mem_sum // self._mem_n if self._mem_n else 0
        peak_memory = max(self._mem_peak, self.memory.peak)
        return {
            "completed": self.completed,
            "failed": self.failed,
            "retried": self.retried,
            "requeued": self.requeued,
            "in_flight": self.in_flight,
            "queued": max(0, self.queued),
            "total": done + remaining,
            "elapsed": elapsed,
            "pages_per_second": rate,
            "status_counts": self.status_counts,
            "domain_counts": self.domain_counts,
            "avg_memory": avg_memory,
            "peak_memory": peak_memory,
            "avg_memory_usage": round(avg_memory / _MB, 1),
            "peak_memory_usage": round(peak_memory / _MB, 1),
            "memory_percent": self.memory_percent,
            "avg_duration": avg_duration,
            "eta_seconds": eta,
        }

    # -- live view ----------------------------------------------------------------------------------

    def _ui_wanted(self) -> bool:
        if self._enable_ui is not None:
            return self._enable_ui
        from rich.console import Console

        console = self._console or Console(stderr=True)
        return bool(console.is_terminal)

    def start(self) -> None:
        """Start the clock and, when wanted, the live view (call inside a running event loop)."""
        if self._started_at is None:
            self._started_at = time.perf_counter()
        self._stopped_at = None
        if self._live is None and self._ui_wanted():
            from rich.console import Console
            from rich.live import Live

            console = self._console or Console(stderr=True)
            self._live = Live(self.render(), console=console, refresh_per_second=self._refresh, transient=False)
            self._live.start()
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="crawlherd-monitor")

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0 / self._refresh)
            self.record_memory(self.memory.rss())
            self.memory_percent = float(self.system_memory())
            if self._live is not None:
                self._live.update(self.render())

    async def stop(self) -> None:
        """Stop the clock and the live view (which shows the final figures)."""
        self._stopped_at = time.perf_counter()
        ticker, self._ticker = self._ticker, None
        await cancel_and_wait(ticker)
        live, self._live = self._live, None
        if live is not None:
            live.update(self.render())
            live.stop()

    def render(self) -> Any:
        """The live view: a rich renderable."""
        from rich.table import Table

        s = self.get_statistics()
        table = Table(title="crawlherd", show_header=False, expand=False)
        table.add_column(justify="right", style="bold")
        table.add_column()
        eta = s["eta_seconds"]
        table.add_row("completed", f"{s['completed']}  failed {s['failed']}  retried {s['retried']}")
        table.add_row("in flight", f"{s['in_flight']}  queued {s['queued']}")
        table.add_row("pages/s", f"{s['pages_per_second']:.1f}  ETA {'-' if eta is None else f'{eta:.0f} s'}")
        pct = s["memory_percent"]
        limit = "" if pct is None else f"  {pct:.0f}% of {getattr(self.system_memory, 'source', 'the limit')}"
        rss = f"avg {s['avg_memory'] / 2**20:.0f} MiB  peak {s['peak_memory'] / 2**20:.0f} MiB"
        table.add_row("memory", rss + limit)
        statuses = sorted(s["status_counts"].items(), key=lambda kv: -kv[1])[:6]
        table.add_row("status", "  ".join(f"{k}:{v}" for k, v in statuses) or "-")
        domains = sorted(s["domain_counts"].items(), key=lambda kv: -kv[1])[:5]
        table.add_row("domains", "  ".join(f"{k}:{v}" for k, v in domains) or "-")
        recent = self.recent
        if recent is None:
            return table
        from rich.console import Group

        rows = Table(title=f"last {self.max_visible_rows} URLs", expand=False)
        for name in ("url", "status", "time", "memory"):
            rows.add_column(name, justify="left" if name == "url" else "right", overflow="ellipsis")
        for row in recent:
            rows.add_row(row.url[:80], row.status, f"{row.duration:.2f} s", f"{row.memory / _MB:.0f} MB")
        return Group(table, rows)
