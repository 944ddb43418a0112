"""The crawl frontier: priority queue + duplicate filter, with leases and per-host politeness.

``open_scheduler(url="memory://", **options)`` returns a :class:`Frontier` for the backend the URL
names. Common options (every backend): ``clock``, ``delay`` (per-host minimum delay, seconds),
``max_in_flight`` (per-host cap), ``host_policies`` ({host: {"delay": s, "max_in_flight": n}}),
``lease_timeout``, ``max_size``, ``full_policy`` (``block`` | ``raise``), ``dupefilter`` (``exact`` |
``bloom``), ``error_rate`` and ``capacity`` (Bloom).
"""

from __future__ import annotations

from typing import Any

from crawlherd._registry import open_backend, redis_aliases
from crawlherd.frontier.base import Frontier, FrontierAdmin, FrontierStats, FullPolicy, HostState, Lease

__all__ = [
    "BACKEND_ALIASES",
    "Frontier",
    "FrontierAdmin",
    "FrontierStats",
    "FullPolicy",
    "HostState",
    "Lease",
    "open_scheduler",
]

BACKEND_ALIASES: dict[str, str] = {
    "memory": "crawlherd.frontier.memory:MemoryFrontier",
    "sqlite": "crawlherd.frontier.sqlite:SQLiteFrontier",
    **redis_aliases("crawlherd.frontier.redis:RedisFrontier"),
}


def open_scheduler(url: str = "memory://", **options: Any) -> Frontier:
    """A frontier for ``url``; use it as ``async with open_scheduler(url) as frontier: ...``.

    Query parameters of the URL are options too (``redis://host/0?prefix=crawl&dupefilter=bloom``);
    keyword options win over them.
    """
    frontier: Frontier = open_backend(url, BACKEND_ALIASES, "frontier", **options)
    return frontier
