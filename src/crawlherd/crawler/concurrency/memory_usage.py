"""Memory readings, one home for both readers the engine uses:

- :class:`SystemMemory`: memory in use as a **percentage of the container's limit** when there is one
  (cgroup v2 ``memory.max``/``memory.current``, then cgroup v1
  ``memory.limit_in_bytes``/``memory.usage_in_bytes``), else of the machine's memory (psutil). The
  :class:`~crawlherd.crawler.concurrency.memory_adaptive.MemoryAdaptiveDispatcher` decides on it and the
  :class:`~crawlherd.crawler.concurrency.monitor.CrawlerMonitor` shows it.
- :class:`ProcessMemory`: this process's resident memory (RSS) in bytes, throttled, for the per-URL
  figures in :class:`~crawlherd.result.DispatchInfo` and the monitor's averages.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

__all__ = ["ProcessMemory", "SystemMemory"]


class SystemMemory:
    """Memory in use, in percent of the container's limit (cgroup v2, then v1) or else of the
    machine. ``SystemMemory(cgroup_root="/sys/fs/cgroup")``; call it for a reading. ``source`` says
    which: ``"cgroup v2"``, ``"cgroup v1"`` or ``"machine"``."""

    def __init__(self, cgroup_root: str | Path = "/sys/fs/cgroup") -> None:
        self.root = Path(cgroup_root)
        self.source, self._files = self._detect()

    def _detect(self) -> tuple[str, tuple[Path, Path] | None]:
        total = psutil.virtual_memory().total
        v2 = (self.root / "memory.max", self.root / "memory.current")
        v1 = (self.root / "memory" / "memory.limit_in_bytes", self.root / "memory" / "memory.usage_in_bytes")
        for name, files in (("cgroup v2", v2), ("cgroup v1", v1)):
            limit = _read_int(files[0])
            # "max" (v2) or a huge number (v1: no limit set) means the machine's memory is the limit.
            if limit is not None and 0 < limit < total and _read_int(files[1]) is not None:
                return name, files
        return "machine", None

    @property
    def limit(self) -> int:
        """The limit readings are a percentage of, in bytes."""
        if self._files is not None:
            value = _read_int(self._files[0])
            if value:
                return value
        return int(psutil.virtual_memory().total)

    def __call__(self) -> float:
        if self._files is not None:
            limit = _read_int(self._files[0])
            used = _read_int(self._files[1])
            if limit and used is not None:
                return 100.0 * used / limit
        return float(psutil.virtual_memory().percent)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class ProcessMemory:
    """This process's resident memory in bytes, read at most every ``interval`` seconds (a psutil
    read costs tens of microseconds; the dispatcher asks twice per page). ``peak``: the highest seen."""

    def __init__(self, interval: float = 0.25) -> None:
        self._process = psutil.Process()
        self._interval = interval
        self._at = -1e18
        self._value = 0
        self.peak = 0

    def rss(self) -> int:
        now = time.monotonic()
        if now - self._at >= self._interval:
            self._at = now
            self._value = self._process.memory_info().rss
            if self._value > self.peak:
                self.peak = self._value
        return self._value
