"""Sessions and proxy health per website, kept where the frontier is (see :mod:`crawlherd.sessions.base`).

``open_sessions(frontier_url)`` returns the :class:`SessionStore` for the frontier the URL names:
``memory://`` (this process), ``sqlite:///path`` (a table of its own in a file beside the frontier's,
``<path>.sessions``), ``redis://`` / ``rediss://`` / ``redis+cluster://`` (the frontier's Redis, keys under
``<prefix>:sessions:``).
"""

from __future__ import annotations

from typing import Any

from crawlherd._registry import open_backend, redis_aliases
from crawlherd.sessions.base import Outcome, ProxyHealth, Session, SessionChange, SessionStore, SiteHealth, TierRule

__all__ = [
    "BACKEND_ALIASES",
    "Outcome",
    "ProxyHealth",
    "Session",
    "SessionChange",
    "SessionStore",
    "SiteHealth",
    "TierRule",
    "open_sessions",
]

BACKEND_ALIASES: dict[str, str] = {
    "memory": "crawlherd.sessions.memory:MemorySessions",
    "sqlite": "crawlherd.sessions.sqlite:SQLiteSessions",
    **redis_aliases("crawlherd.sessions.redis:RedisSessions"),
}


def open_sessions(url: str = "memory://", **options: Any) -> SessionStore:
    """The sessions store of the frontier at ``url``: ``async with open_sessions(url) as store: ...``."""
    store: SessionStore = open_backend(url, BACKEND_ALIASES, "sessions store", **options)
    return store
