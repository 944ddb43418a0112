"""``ResultCache``: the crawler's memory of pages fetched (``CrawlerRunConfig(cache_mode=...)``).

Bounded twice over: at most ``max_entries`` results and at most ``max_bytes`` of bodies and
screenshots together; past either bound the least recently used results go first. A result larger
than the whole byte budget is not kept at all. A crawler that runs for days with ``cache_mode="refresh"``
therefore holds a fixed amount of memory, not every page it ever saw.
"""

from __future__ import annotations

from collections import OrderedDict

from crawlherd.errors import ConfigurationError
from crawlherd.result import CrawlResult

__all__ = ["DEFAULT_CACHE_MAX_BYTES", "DEFAULT_CACHE_MAX_ENTRIES", "ResultCache"]

#: Results kept by default.
DEFAULT_CACHE_MAX_ENTRIES = 1000
#: Bytes of bodies and screenshots kept by default (64 MiB).
DEFAULT_CACHE_MAX_BYTES = 64 * 1024 * 1024


def _size(result: CrawlResult) -> int:
    return len(result.body or b"") + len(result.screenshot or "")


class ResultCache:
    """Results by request fingerprint, least recently used out first. ``ResultCache(max_entries=1000,
    max_bytes=64 MiB)``; ``len()`` is the number kept, :attr:`bytes` what their bodies weigh."""

    __slots__ = ("_results", "bytes", "max_bytes", "max_entries")

    def __init__(self, max_entries: int = DEFAULT_CACHE_MAX_ENTRIES, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        if not isinstance(max_entries, int) or max_entries < 1:
            raise ConfigurationError(f"cache_max_entries={max_entries!r}: must be an int >= 1")
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ConfigurationError(f"cache_max_bytes={max_bytes!r}: must be an int >= 0 bytes")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._results: OrderedDict[bytes, CrawlResult] = OrderedDict()

    def __len__(self) -> int:
        return len(self._results)

    def get(self, fingerprint: bytes) -> CrawlResult | None:
        """The result kept for ``fingerprint`` (now the most recently used), or None."""
        hit = self._results.get(fingerprint)
        if hit is not None:
            self._results.move_to_end(fingerprint)
        return hit

    def put(self, fingerprint: bytes, result: CrawlResult) -> None:
        """Keep ``result`` (replacing an earlier one), then forget the least recently used results
        until both bounds hold. A result over the whole byte budget is not kept."""
        results = self._results
        old = results.pop(fingerprint, None)
        if old is not None:
            self.bytes -= _size(old)
        size = _size(result)
        if size > self.max_bytes:
            return
        results[fingerprint] = result
        self.bytes += size
        while len(results) > self.max_entries or self.bytes > self.max_bytes:
            _, dropped = results.popitem(last=False)
            self.bytes -= _size(dropped)
