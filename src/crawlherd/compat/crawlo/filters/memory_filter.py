"""Crawlo's in-process filters (``crawlo.filters.memory_filter``): :class:`MemoryFilter` and
:class:`MemoryFileFilter` (the same, its fingerprints also appended to
``REQUEST_DIR/request_fingerprints.txt`` and read back at start, so a restarted crawl remembers)."""

from __future__ import annotations

import asyncio
import os
import warnings
from collections import OrderedDict
from typing import IO, Any

from crawlherd.compat.crawlo.filters import BaseFilter, setting

__all__ = ["MemoryFileFilter", "MemoryFilter"]


class MemoryFilter(BaseFilter):
    """``MemoryFilter(crawler)``: fingerprints in a set in this process. Settings:
    ``MEMORY_FILTER_MAX_CAPACITY`` (1,000,000) and ``MEMORY_FILTER_CLEANUP_THRESHOLD`` (0.8): at
    capacity the oldest fingerprints are forgotten down to that fraction -- logged at WARNING, since a
    forgotten URL can be fetched again (crawlherd forgets the oldest; Crawlo forgets at random)."""

    def __init__(self, crawler: Any = None) -> None:
        super().__init__(stats=getattr(crawler, "stats", None), debug=bool(setting(crawler, "FILTER_DEBUG", False)))
        self._configure(crawler)
        self._fingerprints: OrderedDict[str, None] = OrderedDict()
        self._lock = asyncio.Lock()
        self._dupe_count = 0
        self._unique_count = 0
        self._max_capacity = int(setting(crawler, "MEMORY_FILTER_MAX_CAPACITY", 1_000_000))
        self._cleanup_threshold = float(setting(crawler, "MEMORY_FILTER_CLEANUP_THRESHOLD", 0.8))

    @classmethod
    def create_instance(cls, crawler: Any = None, *args: Any, **kwargs: Any) -> MemoryFilter:
        return cls(crawler)

    @property
    def fingerprints(self) -> set[str]:
        return set(self._fingerprints)

    def _add(self, fp: str) -> bool:
        if fp in self._fingerprints:
            return False
        if len(self._fingerprints) >= self._max_capacity:
            keep = int(self._max_capacity * self._cleanup_threshold)
            dropped = len(self._fingerprints) - keep
            for _ in range(dropped):
                self._fingerprints.popitem(last=False)
            self.logger.warning("MemoryFilter at capacity %s: forgot the %s oldest fingerprints", self._max_capacity,
                                dropped)
        self._fingerprints[fp] = None
        self._unique_count += 1
        return True

    def add_fingerprint(self, fp: str) -> None:
        """Deprecated (Crawlo's sync call): use :meth:`add_fingerprint_async`."""
        warnings.warn("MemoryFilter.add_fingerprint() is deprecated, use add_fingerprint_async()",
                      DeprecationWarning, stacklevel=2)
        self._add(fp)

    async def add_fingerprint_async(self, fp: str) -> None:
        async with self._lock:
            self._add(fp)

    def requested(self, request: Any) -> bool:
        """Deprecated (Crawlo's sync call): use :meth:`requested_async`."""
        warnings.warn("MemoryFilter.requested() is deprecated, use requested_async()", DeprecationWarning, stacklevel=2)
        self._request_count += 1
        if not self._add(self._get_fingerprint(request)):
            self._dupe_count += 1
            return True
        return False

    async def requested_async(self, request: Any) -> bool:
        """True when ``request`` was seen before (it is recorded otherwise)."""
        fp = self._get_fingerprint(request)
        async with self._lock:
            self._request_count += 1
            if self._add(fp):
                return False
            self._dupe_count += 1
            return True

    def __contains__(self, item: object) -> bool:
        return item in self._fingerprints

    async def contains_async(self, item: str) -> bool:
        return item in self._fingerprints

    def __len__(self) -> int:
        return len(self._fingerprints)

    def stats_summary(self) -> dict[str, Any]:
        return {"fingerprints": len(self._fingerprints), "unique": self._unique_count, "duplicates": self._dupe_count,
                "max_capacity": self._max_capacity}

    def clear(self) -> None:
        self._fingerprints.clear()
        self._unique_count = 0
        self._dupe_count = 0

    async def clear_async(self) -> None:
        async with self._lock:
            self.clear()

    async def closed(self) -> None:
        self.close()


class MemoryFileFilter(MemoryFilter):
    """``MemoryFileFilter(crawler)``: a :class:`MemoryFilter` whose fingerprints are also appended to
    ``REQUEST_DIR/request_fingerprints.txt`` (read back when it starts). Without ``REQUEST_DIR`` it is a
    plain MemoryFilter."""

    def __init__(self, crawler: Any = None) -> None:
        super().__init__(crawler)
        self._file: IO[str] | None = None
        request_dir = setting(crawler, "REQUEST_DIR")
        if request_dir:
            os.makedirs(request_dir, exist_ok=True)
            path = os.path.join(request_dir, "request_fingerprints.txt")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        if line.strip():
                            self._fingerprints[line.strip()] = None
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the filter's life

    def _add(self, fp: str) -> bool:
        added = super()._add(fp)
        if added and self._file is not None:
            self._file.write(fp + "\n")
            self._file.flush()
        return added

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    async def close_async(self) -> None:
        self.close()
