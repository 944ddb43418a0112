"""Opt-in allocation tracing for long-running processes: what grows.

``CRAWLHERD_TRACEMALLOC=<seconds>`` in the environment of ``crawlherd worker``, ``dispatch``, ``run``
or ``crawl`` starts :mod:`tracemalloc` when the event loop starts and, every ``<seconds>``, logs (at
WARNING, logger ``crawlherd.memtrace``, so that it shows without ``-v``) the traced total and the top
allocation sites by growth since the **first** report -- the first report is the baseline, taken after
the process warmed up for one interval, so that imports and first connections do not hide what grows
later. ``CRAWLHERD_TRACEMALLOC_FRAMES`` (default 6) is how many frames each allocation keeps; the
biggest growths are also shown with their call stack; ``0`` traces nothing and reports only the memory
line below (at no cost worth measuring: for a long soak). Tracing costs CPU and memory (about +30 % and
a few MiB): a diagnostic, not for production.

Each report also gives the process's RSS and, on glibc, what C's allocator holds (``mallinfo2``): the
bytes in use, the bytes **free but kept** in its arenas (not returned to the system: fragmentation
and warm-up, which RSS counts and tracemalloc does not) and the bytes in large ``mmap`` blocks. RSS
growing while the traced total stays flat and "free but kept" grows is the allocator, not a leak.
``CRAWLHERD_TRACEMALLOC_TRIM=1`` asks glibc to give its free pages back (``malloc_trim(0)``) before
each report: the RSS then counts only what the process holds, so a series of it tells the allocator's
keeping from a leak (a diagnostic too: trimming costs a few milliseconds each time).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import sys
import tracemalloc
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["ENV", "growth_report", "interval_from_env", "frames_from_env", "memory_line", "traced"]

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


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo() -> _MallInfo2 | None:
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc (or older than 2.33)
        return None
    mallinfo2.restype = _MallInfo2
    info: _MallInfo2 = mallinfo2()
    return info


def _trim_enabled() -> bool:
    return os.environ.get(f"{ENV}_TRIM", "").strip().lower() in ("1", "true", "yes", "on")


def _malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: free pages back to the system (False where there is no glibc)."""
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


def memory_line() -> str:
    """RSS, the blocks Python's allocator holds (objects alive: a count that grows with a leak of
    objects, tracing or not), and glibc malloc's in use / free but kept / mmapped (MiB) where it can be
    read."""
    parts = ["after malloc_trim"] if _trim_enabled() and _malloc_trim() else []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                parts.append(f"RSS {int(line.split()[1]) / 1024:.1f} MiB")
    parts.append(f"{sys.getallocatedblocks()} Python blocks")
    info = _mallinfo()
    if info is not None:
        parts.append(f"malloc: in use {info.uordblks / 2**20:.1f}, free but kept {info.fordblks / 2**20:.1f}, "
                     f"mmapped {info.hblkhd / 2**20:.1f} MiB")
    return "; ".join(parts)


async def _report_every(seconds: float) -> None:
    await asyncio.sleep(seconds)
    if not tracemalloc.is_tracing():  # CRAWLHERD_TRACEMALLOC_FRAMES=0: RSS and the allocator only
        ticks = 1
        while True:
            log.warning("memory at %.0fs: %s", ticks * seconds, memory_line())
            await asyncio.sleep(seconds)
            ticks += 1
    baseline = tracemalloc.take_snapshot()
    log.warning("tracemalloc: baseline after %.0fs, %.1f MiB traced; %s", seconds,
                tracemalloc.get_traced_memory()[0] / 2**20, memory_line())
    ticks = 1
    while True:
        await asyncio.sleep(seconds)
        ticks += 1
        snapshot = tracemalloc.take_snapshot()
        traced, peak = tracemalloc.get_traced_memory()
        log.warning("tracemalloc at %.0fs: %.1f MiB traced (peak %.1f); %s; growth since the baseline:\n%s",
                    ticks * seconds, traced / 2**20, peak / 2**20, memory_line(), growth_report(baseline, snapshot))
        del snapshot


def frames_from_env(env: dict[str, str] | None = None) -> int:
    """``CRAWLHERD_TRACEMALLOC_FRAMES``: frames kept per allocation (default 6; 0: no tracing, the
    reports give RSS and the allocator's figures only)."""
    raw = (os.environ if env is None else env).get(f"{ENV}_FRAMES", "").strip()
    try:
        return max(0, int(raw)) if raw else 6
    except ValueError:
        log.warning("%s_FRAMES=%r is not a whole number; 6 frames", ENV, raw)
        return 6


async def traced(main: Coroutine[Any, Any, T], seconds: float) -> T:
    """Run ``main`` with allocation tracing and a growth report every ``seconds``."""
    frames = frames_from_env()
    if frames and not tracemalloc.is_tracing():
        tracemalloc.start(frames)
    reporter = asyncio.create_task(_report_every(seconds), name="tracemalloc-report")
    try:
        return await main
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
