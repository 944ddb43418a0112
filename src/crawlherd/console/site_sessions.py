"""A website's sessions and proxies as the console shows them: what its workers last reported in their
heartbeats (the sessions store itself is the frontier's, which the console does not open). The most
recent report wins: on a shared (Redis) frontier every worker reports the same store."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.db.heartbeat import list_processes

__all__ = ["ProxyRow", "SiteSessions", "site_sessions"]


@dataclass(frozen=True, slots=True)
class ProxyRow:
    """One proxy (its label: credentials redacted) of a website."""

    proxy: str
    requests: int
    blocks: int
    successes: int
    rest_until: datetime | None  # None: not resting


@dataclass(frozen=True, slots=True)
class SiteSessions:
    """A website's tier, proxies and sessions, as reported by ``worker`` at ``reported_at``."""

    worker: str
    reported_at: datetime
    tier: int
    proxies: list[ProxyRow] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def live(self) -> int:
        return sum(1 for s in self.sessions if not s.get("retired"))


async def site_sessions(engine: AsyncEngine, website: str) -> SiteSessions | None:
    """The latest report of ``website``'s sessions by a live worker (None: no worker fetched it under
    sessions)."""
    latest: SiteSessions | None = None
    for p in await list_processes(engine):
        if p.kind != "worker" or p.state != "alive":
            continue
        raw = p.info.get("sessions", {}).get(website)
        if not isinstance(raw, dict) or (latest is not None and latest.reported_at >= p.last_seen):
            continue
        now = p.last_seen.timestamp()
        proxies = [
            ProxyRow(
                redact_url(str(label)), int(v.get("requests", 0)), int(v.get("blocks", 0)), int(v.get("successes", 0)),
                datetime.fromtimestamp(float(v["rest_until"]), UTC) if float(v.get("rest_until", 0)) > now else None,
            )
            for label, v in raw.get("proxies", {}).items()
        ]
        sessions = [{**s, "proxy": redact_url(str(s.get("proxy", "")))} for s in raw.get("sessions", [])]
        latest = SiteSessions(p.id, p.last_seen, int(raw.get("tier", 0)), proxies, sessions)
    return latest
