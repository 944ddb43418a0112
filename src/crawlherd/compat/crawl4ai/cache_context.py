"""crawl4ai's ``CacheMode`` (``crawl4ai.cache_context``), on the crawler's result cache.

crawlherd keeps the cache in the crawler's memory (bounded, least recently used out first; see
:class:`~crawlherd.crawler.cache.ResultCache`), not in a database on disk as crawl4ai does: a page is
answered from the cache by the crawler that fetched it, for as long as that crawler is open.
"""

from __future__ import annotations

import enum

from crawlherd.errors import ConfigurationError

__all__ = ["CacheMode", "engine_cache_mode"]


class CacheMode(enum.Enum):
    """crawl4ai's cache modes: ``ENABLED`` (read and write), ``DISABLED`` and ``BYPASS`` (neither),
    ``READ_ONLY`` (answer from the cache, never add to it), ``WRITE_ONLY`` (always fetch, keep the page)."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    READ_ONLY = "read_only"
    WRITE_ONLY = "write_only"
    BYPASS = "bypass"


_ENGINE = {
    CacheMode.ENABLED: "enabled",
    CacheMode.DISABLED: "bypass",
    CacheMode.BYPASS: "bypass",
    CacheMode.READ_ONLY: "read_only",
    CacheMode.WRITE_ONLY: "refresh",
}


def engine_cache_mode(mode: object) -> str:
    """The engine's ``cache_mode`` string for a :class:`CacheMode` (or one of the engine's strings)."""
    if isinstance(mode, CacheMode):
        return _ENGINE[mode]
    if isinstance(mode, str) and mode in ("bypass", "enabled", "refresh", "read_only"):
        return mode
    raise ConfigurationError(f"cache_mode={mode!r}: use a CacheMode (ENABLED, DISABLED, READ_ONLY, WRITE_ONLY, BYPASS)")
