"""Crawlo's duplicate filters (``crawlo.filters``): :class:`BaseFilter`, :class:`MemoryFilter`
(:mod:`.memory_filter`), :class:`AioRedisFilter` (:mod:`.aioredis_filter`).

Fingerprints are crawlherd's (:mod:`crawlherd.compat.crawlo.utils.request.fingerprint`), so a filter
and crawlherd's frontier agree on what a duplicate is. Settings read from ``crawler.settings``:
``DUPEFILTER_INCLUDE_HEADERS`` (header names that take part; none by default) and
``DUPEFILTER_INCLUDE_META`` (``meta`` keys that take part; none by default), ``FILTER_DEBUG``.
"""

from __future__ import annotations

import logging
from typing import Any

from crawlherd.compat.crawlo.utils.request.fingerprint import generate_request_fingerprint

__all__ = ["AioRedisFilter", "BaseFilter", "MemoryFilter", "setting"]

log = logging.getLogger("crawlherd.crawlo")


def setting(crawler: Any, name: str, default: Any = None) -> Any:
    """``crawler.settings.get(name, default)``, or ``default`` without a crawler or settings."""
    settings = getattr(crawler, "settings", None)
    if settings is None:
        return default
    value = settings.get(name, default)
    return default if value is None else value


class BaseFilter:
    """What every filter shares: the fingerprint of a request, counts, the duplicate log line."""

    def __init__(self, logger: logging.Logger | None = None, stats: Any = None, debug: bool = False) -> None:
        self.logger = logger or log
        self.stats = stats
        self.debug = debug
        self._request_count = 0
        self._duplicate_count = 0
        self._dupe_include_headers: list[str] = []
        self._dupe_include_meta: list[str] = []

    @classmethod
    def create_instance(cls, *args: Any, **kwargs: Any) -> BaseFilter:
        return cls(*args, **kwargs)

    def _configure(self, crawler: Any) -> None:
        self._dupe_include_headers = list(setting(crawler, "DUPEFILTER_INCLUDE_HEADERS", []) or [])
        self._dupe_include_meta = list(setting(crawler, "DUPEFILTER_INCLUDE_META", []) or [])

    def _get_fingerprint(self, request: Any) -> str:
        meta = getattr(request, "meta", None) or {}
        chosen = {k: meta[k] for k in self._dupe_include_meta if k in meta}
        return generate_request_fingerprint(
            getattr(request, "method", "GET"), request.url, getattr(request, "body", b"") or b"",
            dict(getattr(request, "headers", None) or {}), chosen, self._dupe_include_headers,
        )

    def log_stats(self, request: Any) -> None:
        """Count a duplicate (``filter/duplicate_count`` in the stats); with ``FILTER_DEBUG``, log its
        fingerprint at DEBUG (the scheduler logs the duplicate itself)."""
        self._duplicate_count += 1
        if self.stats is not None and hasattr(self.stats, "inc_value"):
            self.stats.inc_value("filter/duplicate_count")
        if self.debug:
            self.logger.debug("duplicate fingerprint %s: %s", self._get_fingerprint(request), request.url)

    def get_stats(self) -> dict[str, int]:
        return {"requests": self._request_count, "duplicates": self._duplicate_count}

    def reset_stats(self) -> None:
        self._request_count = 0
        self._duplicate_count = 0

    def close(self) -> None:
        return None

    def __str__(self) -> str:
        return f"{type(self).__name__}(duplicates={self._duplicate_count})"


from crawlherd.compat.crawlo.filters.aioredis_filter import AioRedisFilter  # noqa: E402
from crawlherd.compat.crawlo.filters.memory_filter import MemoryFilter  # noqa: E402
