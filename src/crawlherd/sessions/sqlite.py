"""The SQLite sessions store: a resumable crawl's, in a file beside the frontier's (``sqlite:///path``
keeps its sessions in ``path.sessions``; ``sqlite://`` with no path: in memory). Every change is one
``BEGIN IMMEDIATE`` transaction, so processes sharing the file change it one at a time; SQLite's
errors come out as :class:`~crawlherd.errors.BackendUnavailableError` (role ``frontier``)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any
from urllib.parse import unquote, urlsplit

from crawlherd.errors import BackendUnavailableError
from crawlherd.sessions.base import (
    Outcome,
    ProxyHealth,
    Session,
    SessionStore,
    SiteHealth,
    TierRule,
    apply_outcome,
    keep_retired,
)

__all__ = ["SQLiteSessions"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (site TEXT NOT NULL, id TEXT NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (site, id));
CREATE TABLE IF NOT EXISTS site_health (site TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counts (key TEXT PRIMARY KEY, started REAL NOT NULL, n INTEGER NOT NULL);
"""


class SQLiteSessions:
    """Sessions and proxy health in an SQLite file (see the module's docstring)."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._db: sqlite3.Connection | None = None

    @classmethod
    def from_url(cls, url: str = "sqlite://", **options: Any) -> SQLiteSessions:
        parts = urlsplit(url)
        path = unquote(parts.path)[1:] if parts.path.startswith("/") else unquote(parts.path)
        path = f"{path}.sessions" if path and path != ":memory:" else ":memory:"
        known = {"clock"}
        return cls(path, **{k: v for k, v in options.items() if k in known})

    def __repr__(self) -> str:
        return f"<SQLiteSessions {self._path}>"

    async def __aenter__(self) -> SessionStore:
        self._conn()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                db = sqlite3.connect(self._path, timeout=10.0, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
            except sqlite3.Error as exc:
                raise _outage(self._path, exc) from exc
            self._db = db
        return self._db

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise _outage(self._path, exc) from exc

    def _read(self, db: sqlite3.Connection, site: str) -> dict[str, Session]:
        rows = db.execute("SELECT doc FROM sessions WHERE site = ?", (site,)).fetchall()
        return {s.id: s for s in (Session.from_json(r[0]) for r in rows)}

    async def sessions(self, site: str) -> list[Session]:
        with self._tx() as db:
            kept = self._read(db, site)
            for old in keep_retired(kept):
                db.execute("DELETE FROM sessions WHERE site = ? AND id = ?", (site, old))
                del kept[old]
        return list(kept.values())

    def _put(self, db: sqlite3.Connection, site: str, s: Session) -> None:
        db.execute("INSERT OR REPLACE INTO sessions (site, id, doc) VALUES (?, ?, ?)", (site, s.id, s.to_json()))

    def _get(self, db: sqlite3.Connection, site: str, session_id: str) -> Session | None:
        row = db.execute("SELECT doc FROM sessions WHERE site = ? AND id = ?", (site, session_id)).fetchone()
        return None if row is None else Session.from_json(row[0])

    async def add(self, site: str, session: Session) -> None:
        with self._tx() as db:
            self._put(db, site, session)

    async def use(self, site: str, session_id: str) -> Session | None:
        with self._tx() as db:
            s = self._get(db, site, session_id)
            if s is None or s.retired is not None:
                return None
            s = s.updated(uses=s.uses + 1)
            self._put(db, site, s)
        return s

    async def update(
        self,
        site: str,
        session_id: str,
        *,
        cookies: list[dict[str, str]] | None = None,
        error: bool = False,
        login_epoch: int | None = None,
        retire: str | None = None,
    ) -> Session | None:
        with self._tx() as db:
            s = self._get(db, site, session_id)
            if s is None:
                return None
            changes: dict[str, Any] = {}
            if cookies is not None:
                changes["cookies"] = cookies
            if error:
                changes["errors"] = s.errors + 1
            if login_epoch is not None:
                changes["login_epoch"] = login_epoch
            if retire is not None and s.retired is None:
                changes["retired"] = retire
            s = s.updated(**changes)
            self._put(db, site, s)
        return s

    def _health(self, db: sqlite3.Connection, site: str) -> SiteHealth:
        row = db.execute("SELECT doc FROM site_health WHERE site = ?", (site,)).fetchone()
        if row is None:
            return SiteHealth()
        raw = json.loads(row[0])
        proxies = {k: ProxyHealth(**v) for k, v in raw.pop("proxies").items()}
        return SiteHealth(**raw, proxies=proxies)

    async def record(self, site: str, proxy: str, outcome: Outcome, *, now: float, rule: TierRule) -> SiteHealth:
        with self._tx() as db:
            health = apply_outcome(self._health(db, site), proxy, outcome, now, rule)
            db.execute(
                "INSERT OR REPLACE INTO site_health (site, doc) VALUES (?, ?)", (site, json.dumps(asdict(health)))
            )
        return health

    async def health(self, site: str) -> SiteHealth:
        with self._tx() as db:
            return self._health(db, site)

    async def claim(self, key: str, ttl: float) -> bool:
        now = self._clock()
        with self._tx() as db:
            row = db.execute("SELECT until FROM claims WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] > now:
                return False
            db.execute("DELETE FROM claims WHERE until <= ?", (now,))
            db.execute("INSERT OR REPLACE INTO claims (key, until) VALUES (?, ?)", (key, now + ttl))
        return True

    async def count(self, key: str, ttl: float) -> int:
        now = self._clock()
        with self._tx() as db:
            row = db.execute("SELECT started, n FROM counts WHERE key = ?", (key,)).fetchone()
            started, n = (now, 0) if row is None or row[0] + ttl <= now else (row[0], row[1])
            db.execute("INSERT OR REPLACE INTO counts (key, started, n) VALUES (?, ?, ?)", (key, started, n + 1))
        return int(n) + 1

    async def sites(self) -> list[str]:
        with self._tx() as db:
            rows = db.execute("SELECT site FROM sessions UNION SELECT site FROM site_health ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()


def _outage(path: str, exc: sqlite3.Error) -> BackendUnavailableError:
    return BackendUnavailableError(f"the sessions store {path} is unavailable ({exc})", backend="sqlite",
                                   role="frontier")
