"""The SQLite sessions store: a resumable crawl's, in a file beside the frontier's (``sqlite:///path``
keeps its sessions in ``path.sessions``; ``sqlite://`` with no path: in memory). Every change is one
``BEGIN IMMEDIATE`` transaction, so processes sharing the file change it one at a time; SQLite's
errors come out as :class:`~crawlherd.errors.BackendUnavailableError` (role ``frontier``).

The connection lives on a thread of its own (:class:`~crawlherd._sqlite.SQLiteThread`, as the SQLite
broker's), and each method is one transaction run there."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar
from urllib.parse import unquote, urlsplit

from crawlherd._aio import AsyncClosing
from crawlherd._sqlite import SQLiteThread
from crawlherd.errors import BackendUnavailableError
from crawlherd.sessions.base import Outcome, Session, SessionChange, SiteHealth, TierRule, apply_outcome, keep_retired

__all__ = ["SQLiteSessions"]

_T = TypeVar("_T")
_BUSY_TIMEOUT = 10.0  # seconds a transaction waits for another process's

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (site TEXT NOT NULL, id TEXT NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (site, id));
CREATE TABLE IF NOT EXISTS site_health (site TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counts (key TEXT PRIMARY KEY, started REAL NOT NULL, n INTEGER NOT NULL);
"""
_TABLES = ("sessions", "site_health", "claims", "counts")


class SQLiteSessions(AsyncClosing):
    """Sessions and proxy health in an SQLite file (see the module's docstring)."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._db: SQLiteThread | None = None
        self._opening = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str = "sqlite://", **options: Any) -> SQLiteSessions:
        parts = urlsplit(url)
        path = unquote(parts.path)[1:] if parts.path.startswith("/") else unquote(parts.path)
        path = f"{path}.sessions" if path and path != ":memory:" else ":memory:"
        known = {"clock"}
        return cls(path, **{k: v for k, v in options.items() if k in known})

    def __repr__(self) -> str:
        return f"<SQLiteSessions {self._path}>"

    async def __aenter__(self) -> Self:
        await self._open()
        return self

    # -- plumbing: the connection's thread -----------------------------------------------------------

    async def _open(self) -> SQLiteThread:
        async with self._opening:
            if self._db is not None:
                return self._db

            def connect() -> sqlite3.Connection:
                db = sqlite3.connect(self._path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
                try:
                    db.execute("PRAGMA journal_mode=WAL")
                    db.executescript(_SCHEMA)
                except BaseException:
                    db.close()
                    raise
                return db

            try:
                self._db = await SQLiteThread.open(connect, name="crawlherd-sqlite-sessions")
            except sqlite3.Error as exc:
                raise _outage(self._path, exc) from exc
            return self._db

    async def _tx(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(db)`` in one ``BEGIN IMMEDIATE`` transaction, on the connection's thread."""
        conn = await self._open()

        def run(db: sqlite3.Connection) -> _T:
            db.execute("BEGIN IMMEDIATE")
            try:
                out = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return out

        try:
            return await conn.run(run)
        except sqlite3.OperationalError as exc:
            raise _outage(self._path, exc) from exc

    # -- the store -------------------------------------------------------------------------------

    async def sessions(self, site: str) -> list[Session]:
        def work(db: sqlite3.Connection) -> list[Session]:
            kept = _read(db, site)
            for old in keep_retired(kept):
                db.execute("DELETE FROM sessions WHERE site = ? AND id = ?", (site, old))
                del kept[old]
            return list(kept.values())

        return await self._tx(work)

    async def add(self, site: str, session: Session) -> None:
        await self._tx(lambda db: _put(db, site, session))

    async def use(self, site: str, session_id: str) -> Session | None:
        def work(db: sqlite3.Connection) -> Session | None:
            s = _get(db, site, session_id)
            if s is None or s.retired is not None:
                return None
            s = s.updated(uses=s.uses + 1)
            _put(db, site, s)
            return s

        return await self._tx(work)

    async def update(self, site: str, session_id: str, change: SessionChange) -> Session | None:
        def work(db: sqlite3.Connection) -> Session | None:
            s = _get(db, site, session_id)
            if s is None:
                return None
            s = change.apply(s)
            _put(db, site, s)
            return s

        return await self._tx(work)

    async def record(self, site: str, proxy: str, outcome: Outcome, *, now: float, rule: TierRule) -> SiteHealth:
        def work(db: sqlite3.Connection) -> SiteHealth:
            health = apply_outcome(_health(db, site), proxy, outcome, now, rule)
            db.execute("INSERT OR REPLACE INTO site_health (site, doc) VALUES (?, ?)", (site, health.to_json()))
            return health

        return await self._tx(work)

    async def health(self, site: str) -> SiteHealth:
        return await self._tx(lambda db: _health(db, site))

    async def claim(self, key: str, ttl: float) -> bool:
        now = self._clock()

        def work(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT until FROM claims WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] > now:
                return False
            db.execute("DELETE FROM claims WHERE until <= ?", (now,))
            db.execute("INSERT OR REPLACE INTO claims (key, until) VALUES (?, ?)", (key, now + ttl))
            return True

        return await self._tx(work)

    async def count(self, key: str, ttl: float) -> int:
        now = self._clock()

        def work(db: sqlite3.Connection) -> int:
            row = db.execute("SELECT started, n FROM counts WHERE key = ?", (key,)).fetchone()
            started, n = (now, 0) if row is None or row[0] + ttl <= now else (row[0], row[1])
            db.execute("INSERT OR REPLACE INTO counts (key, started, n) VALUES (?, ?, ?)", (key, started, n + 1))
            return int(n) + 1

        return await self._tx(work)

    async def sites(self) -> list[str]:
        return await self._tx(_sites)

    async def purge(self) -> int:
        def work(db: sqlite3.Connection) -> int:
            n = len(_sites(db))
            for table in _TABLES:
                db.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed names
            return n

        return await self._tx(work)

    async def close(self) -> None:
        async with self._opening:
            db, self._db = self._db, None
        if db is not None:
            await db.close()


# -- one transaction's statements (run on the connection's thread) ---------------------------------


def _read(db: sqlite3.Connection, site: str) -> dict[str, Session]:
    rows = db.execute("SELECT doc FROM sessions WHERE site = ?", (site,)).fetchall()
    return {s.id: s for s in (Session.from_json(r[0]) for r in rows)}


def _put(db: sqlite3.Connection, site: str, s: Session) -> None:
    db.execute("INSERT OR REPLACE INTO sessions (site, id, doc) VALUES (?, ?, ?)", (site, s.id, s.to_json()))


def _get(db: sqlite3.Connection, site: str, session_id: str) -> Session | None:
    row = db.execute("SELECT doc FROM sessions WHERE site = ? AND id = ?", (site, session_id)).fetchone()
    return None if row is None else Session.from_json(row[0])


def _health(db: sqlite3.Connection, site: str) -> SiteHealth:
    row = db.execute("SELECT doc FROM site_health WHERE site = ?", (site,)).fetchone()
    return SiteHealth() if row is None else SiteHealth.from_json(row[0])


def _sites(db: sqlite3.Connection) -> list[str]:
    rows = db.execute("SELECT site FROM sessions UNION SELECT site FROM site_health ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def _outage(path: str, exc: sqlite3.Error) -> BackendUnavailableError:
    return BackendUnavailableError(f"the sessions store {path} is unavailable ({exc})", backend="sqlite",
                                   role="frontier")
