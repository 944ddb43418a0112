"""The sessions store: what a fleet learns about fetching each website, shared by its workers.

A **session** binds cookies, headers and one proxy (Crawlee's model): it is used for at most a number
of pages and an age, counts its errors, and is retired when blocked. **Proxy health** is per website
and proxy: requests, blocks, successes and the time the proxy rests until after a block; the
website's **tier** (which proxy tier it is on) goes up after blocks in a row and back down after a run
of successes. The store lives where the frontier does -- memory for one process, SQLite for a
resumable crawl, Redis for the fleet -- so a ban one worker meets steers every worker away from that
proxy for that website on their next page, and a login made by one is used by all.

Proxies are keyed by their *label* (the URL with its credentials redacted, ``"direct"`` without a
proxy): no credential is ever written to the store. Every backend passes the same contract suite
(``tests/contract/test_sessions_contract.py``); :class:`~crawlherd.sessions.memory.MemorySessions` is the
reference.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

__all__ = ["Outcome", "ProxyHealth", "Session", "SessionChange", "SessionStore", "SiteHealth", "TierRule"]

#: What one fetch through a proxy came to.
Outcome = Literal["ok", "blocked", "error"]
_KEPT_RETIRED = 50  # retired sessions kept per website (for the operator), the oldest dropped first


@dataclass(frozen=True, slots=True)
class Session:
    """One session of one website. ``proxy`` is a proxy *label* (see the module's docstring);
    ``cookies`` are ``{"name", "value", "domain", "path"}`` dicts; ``login_epoch`` counts its logins
    (0: not logged in); ``retired`` says why it is no longer used (None: live)."""

    id: str
    proxy: str
    tier: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    cookies: list[dict[str, str]] = field(default_factory=list)
    created: float = 0.0
    uses: int = 0
    errors: int = 0
    login_epoch: int = 0
    retired: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Session:
        raw = json.loads(text)
        return cls(**{k: raw[k] for k in cls.__slots__ if k in raw})  # a newer field is ignored

    def updated(self, **changes: Any) -> Session:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class SessionChange:
    """A change to a session, made in one step by :meth:`SessionStore.update`: replace its ``cookies``,
    count an ``error``, set its ``login_epoch``, ``retire`` it with a reason (a retired session keeps
    its first reason)."""

    cookies: list[dict[str, str]] | None = None
    error: bool = False
    login_epoch: int | None = None
    retire: str | None = None

    def apply(self, s: Session) -> Session:
        """``s`` changed (what the in-process stores keep; the Redis store does the same in Lua)."""
        changes: dict[str, Any] = {}
        if self.cookies is not None:
            changes["cookies"] = self.cookies
        if self.error:
            changes["errors"] = s.errors + 1
        if self.login_epoch is not None:
            changes["login_epoch"] = self.login_epoch
        if self.retire is not None and s.retired is None:
            changes["retired"] = self.retire
        return s.updated(**changes)


@dataclass(frozen=True, slots=True)
class ProxyHealth:
    """One proxy's record for one website."""

    proxy: str
    requests: int = 0
    blocks: int = 0
    successes: int = 0
    rest_until: float = 0.0

    def resting(self, now: float) -> bool:
        return self.rest_until > now


@dataclass(frozen=True, slots=True)
class SiteHealth:
    """A website's tier, the blocks and successes in a row that move it, and its proxies' health."""

    tier: int = 0
    blocks_in_row: int = 0
    successes_in_row: int = 0
    proxies: dict[str, ProxyHealth] = field(default_factory=dict)

    def proxy(self, label: str) -> ProxyHealth:
        return self.proxies.get(label) or ProxyHealth(label)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> SiteHealth:
        raw = json.loads(text)
        proxies = {label: ProxyHealth(**p) for label, p in raw.pop("proxies").items()}
        return cls(**raw, proxies=proxies)


@dataclass(frozen=True, slots=True)
class TierRule:
    """How a recorded outcome moves a website: a block rests the proxy ``cool_off`` seconds;
    ``escalate_after`` blocks in a row move the website up a tier (up to ``tiers - 1``);
    ``descend_after`` successes in a row move it back down."""

    tiers: int = 1
    cool_off: float = 60.0
    escalate_after: int = 3
    descend_after: int = 50


def apply_outcome(site: SiteHealth, label: str, outcome: Outcome, now: float, rule: TierRule) -> SiteHealth:
    """``site`` after one fetch through ``label`` came to ``outcome`` (the rule every backend keeps;
    the Redis store runs the same steps in Lua)."""
    p = site.proxy(label)
    tier, blocks, oks = site.tier, site.blocks_in_row, site.successes_in_row
    p = replace(p, requests=p.requests + 1)
    if outcome == "ok":
        p = replace(p, successes=p.successes + 1)
        oks, blocks = oks + 1, 0
        if oks >= rule.descend_after and tier > 0:
            tier, oks = tier - 1, 0
    elif outcome == "blocked":
        p = replace(p, blocks=p.blocks + 1, rest_until=max(p.rest_until, now + rule.cool_off))
        blocks, oks = blocks + 1, 0
        if blocks >= rule.escalate_after and tier < rule.tiers - 1:
            tier, blocks = tier + 1, 0
    return SiteHealth(tier, blocks, oks, {**site.proxies, label: p})


class SessionStore(Protocol):
    """Sessions and proxy health per website (see the module's docstring). An async context manager;
    every method may raise :class:`~crawlherd.errors.BackendUnavailableError` (role ``frontier``)."""

    async def __aenter__(self) -> SessionStore: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def sessions(self, site: str) -> list[Session]:
        """The website's sessions, live and (the last few) retired."""
        ...

    async def add(self, site: str, session: Session) -> None:
        """Keep a new session (its id is new)."""
        ...

    async def use(self, site: str, session_id: str) -> Session | None:
        """Count one use of a live session and return it, as now stored; None when it is retired or gone."""
        ...

    async def update(self, site: str, session_id: str, change: SessionChange) -> Session | None:
        """Make ``change`` to a session in one step. The session as now stored (None: gone)."""
        ...

    async def record(self, site: str, proxy: str, outcome: Outcome, *, now: float, rule: TierRule) -> SiteHealth:
        """Record one fetch's outcome through ``proxy`` (:func:`apply_outcome`, atomically)."""
        ...

    async def health(self, site: str) -> SiteHealth:
        """The website's tier and its proxies' health."""
        ...

    async def claim(self, key: str, ttl: float) -> bool:
        """True for the first caller of ``key`` within ``ttl`` seconds (a login made once per lapse)."""
        ...

    async def count(self, key: str, ttl: float) -> int:
        """Add one to the counter ``key`` (forgotten ``ttl`` seconds after its first count); its value."""
        ...

    async def sites(self) -> list[str]:
        """The websites the store holds something for."""
        ...

    async def purge(self) -> int:
        """Forget everything: every website's sessions and proxy health (its tier), the claims and
        counters; how many websites it held something for. ``crawlherd frontier purge`` calls it with
        the frontier's own purge; stop the workers first."""
        ...

    async def close(self) -> None:
        """Release what the store opened. Idempotent."""
        ...


def keep_retired(sessions: dict[str, Session]) -> list[str]:
    """The ids of the retired sessions beyond the last :data:`_KEPT_RETIRED` (to forget)."""
    retired = [s for s in sessions.values() if s.retired is not None]
    if len(retired) <= _KEPT_RETIRED:
        return []
    retired.sort(key=lambda s: s.created)
    return [s.id for s in retired[: len(retired) - _KEPT_RETIRED]]
