"""Opt-in allocation tracing for long-running processes: what grows.

``CRAWLHERD_TRACEMALLOC=<seconds>`` in the environment of ``crawlherd worker``, ``dispatch``, ``run``
or ``crawl`` starts :mod:`tracemalloc` when the event loop starts and, every ``<seconds>``, logs (at
WARNING, logger ``crawlherd.memtrace``, so that it shows without ``-v``) the traced total and the top
allocation sites by growth since the **first** report -- the first report is the baseline, taken after
the process warmed up for one interval, so that imports and first connections do not hide what grows
later. ``CRAWLHERD_TRACEMALLOC_FRAMES`` (default 6) is how many frames each allocation keeps; the
biggest growths are also shown with their call stack. Tracing costs CPU and memory (about +30 % and
a few MiB): a diagnostic, not for production.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tracemalloc
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["ENV", "growth_report", "interval_from_env", "traced"]

T = TypeVar("T")
ENV = "CRAWLHERD_TRACEMALLOC"
log = logging.getLogger("crawlherd.memtrace")
_IGNORED = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
    tracemalloc.Filter(False, __file__),
)


def interval_from_env(env: dict[str, str] | None = None) -> float | None:
    """The report interval from ``CRAWLHERD_TRACEMALLOC`` (None: unset, empty or not a positive number)."""
    raw = (os.environ if env is None else env).get(ENV, "").strip()
    try:
        seconds = float(raw)
    except ValueError:
        if raw:
            log.warning("%s=%r is not a number of seconds; allocation tracing stays off", ENV, raw)
        return None
    return seconds if seconds > 0 else None


def growth_report(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, *, top: int = 12,
                  stacks: int = 3) -> str:
    """The ``top`` allocation sites by growth from ``before`` to ``after`` (size and count deltas),
    then the ``stacks`` biggest growths with their call stacks."""
    before, after = before.filter_traces(_IGNORED), after.filter_traces(_IGNORED)
    lines = []
    for stat in after.compare_to(before, "lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  "
                     f"{frame.filename}:{frame.lineno}  (now {stat.size / 1024:.1f} KiB)")
    for stat in after.compare_to(before, "traceback")[:stacks]:
        lines.append(f"  stack of {stat.size_diff / 1024:+.1f} KiB {stat.count_diff:+d} blocks (innermost last):")
        lines.extend(f"    {frame.filename}:{frame.lineno}" for frame in stat.traceback)
    return "\n".join(lines)


async def _report_every(seconds: float) -> None:
    await asyncio.sleep(seconds)
    baseline = tracemalloc.take_snapshot()
    log.warning("tracemalloc: baseline after %.0fs, %.1f MiB traced", seconds,
                tracemalloc.get_traced_memory()[0] / 2**20)
    ticks = 1
    while True:
        await asyncio.sleep(seconds)
        ticks += 1
        snapshot = tracemalloc.take_snapshot()
        traced, peak = tracemalloc.get_traced_memory()
        log.warning("tracemalloc at %.0fs: %.1f MiB traced (peak %.1f); growth since the baseline:\n%s",
                    ticks * seconds, traced / 2**20, peak / 2**20, growth_report(baseline, snapshot))
        del snapshot


async def traced(main: Coroutine[Any, Any, T], seconds: float) -> T:
    """Run ``main`` with allocation tracing and a growth report every ``seconds``."""
    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ.get(f"{ENV}_FRAMES", "6") or 6))
    reporter = asyncio.create_task(_report_every(seconds), name="tracemalloc-report")
    try:
        return await main
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
