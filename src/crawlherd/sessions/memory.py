"""The in-memory sessions store: one process's, the reference every backend is tested against."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from crawlherd._aio import AsyncClosing
from crawlherd.sessions.base import Outcome, Session, SessionChange, SiteHealth, TierRule, apply_outcome, keep_retired

__all__ = ["MemorySessions"]


class MemorySessions(AsyncClosing):
    """Sessions and proxy health in this process (``memory://``). ``clock`` (monotonic seconds by
    default) ages ``claim`` and ``count``."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sessions: dict[str, dict[str, Session]] = {}
        self._health: dict[str, SiteHealth] = {}
        self._claims: dict[str, float] = {}
        self._counts: dict[str, tuple[float, int]] = {}

    @classmethod
    def from_url(cls, url: str = "memory://", **options: Any) -> MemorySessions:
        return cls(**options)

    def __repr__(self) -> str:
        return f"<MemorySessions sites={len(self._sessions)}>"

    async def sessions(self, site: str) -> list[Session]:
        return list(self._sessions.get(site, {}).values())

    async def add(self, site: str, session: Session) -> None:
        kept = self._sessions.setdefault(site, {})
        kept[session.id] = session

    async def use(self, site: str, session_id: str) -> Session | None:
        kept = self._sessions.get(site, {})
        s = kept.get(session_id)
        if s is None or s.retired is not None:
            return None
        s = kept[session_id] = s.updated(uses=s.uses + 1)
        return s

    async def update(self, site: str, session_id: str, change: SessionChange) -> Session | None:
        kept = self._sessions.get(site, {})
        s = kept.get(session_id)
        if s is None:
            return None
        s = kept[session_id] = change.apply(s)
        if change.retire is not None:
            for old in keep_retired(kept):
                del kept[old]
        return s

    async def record(self, site: str, proxy: str, outcome: Outcome, *, now: float, rule: TierRule) -> SiteHealth:
        health = self._health[site] = apply_outcome(self._health.get(site) or SiteHealth(), proxy, outcome, now, rule)
        return health

    async def health(self, site: str) -> SiteHealth:
        return self._health.get(site) or SiteHealth()

    async def claim(self, key: str, ttl: float) -> bool:
        now = self._clock()
        until = self._claims.get(key)
        if until is not None and until > now:
            return False
        self._claims = {k: v for k, v in self._claims.items() if v > now}
        self._claims[key] = now + ttl
        return True

    async def count(self, key: str, ttl: float) -> int:
        now = self._clock()
        started, n = self._counts.get(key, (now, 0))
        if started + ttl <= now:
            started, n = now, 0
        self._counts[key] = (started, n + 1)
        if len(self._counts) > 100_000:
            self._counts = {k: v for k, v in self._counts.items() if v[0] + ttl > now}
        return n + 1

    async def sites(self) -> list[str]:
        return sorted(set(self._sessions) | set(self._health))

    async def purge(self) -> int:
        n = len(await self.sites())
        self._sessions.clear()
        self._health.clear()
        self._claims.clear()
        self._counts.clear()
        return n

    async def close(self) -> None:
        return None
