"""Engines for the config DB: SQLite (aiosqlite, WAL, busy timeout, ``BEGIN IMMEDIATE``) or PostgreSQL
(asyncpg). Users give plain URLs (``sqlite:///path``, ``postgresql://user@host/db``); they are mapped to
the async drivers here, and never logged with their secrets.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InvalidatePoolError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from crawlherd import _json
from crawlherd._redact import redact_url
from crawlherd.db._inline_sqlite import InlineConnection, inline_connect
from crawlherd.db.dialect import sql_capabilities
from crawlherd.errors import BackendUnavailableError, ConfigurationError, disk_full, is_disk_full

__all__ = ["async_database_url", "count_rows", "create_engine", "db_now", "dialect_of"]

log = logging.getLogger(__name__)

_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg"}


def async_database_url(url: str) -> str:
    """``sqlite:///path`` -> ``sqlite+aiosqlite:///path``; ``postgresql://`` -> ``postgresql+asyncpg://``.

    URLs that already name the async driver are kept; any other scheme is a :class:`ConfigurationError`.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        return url
    base = scheme.split("+", 1)[0]
    driver = _DRIVERS.get(base)
    if driver is None or "+" in scheme:
        raise ConfigurationError(
            f"unsupported database URL {redact_url(url)!r}: use sqlite:///path/to/file.db or "
            "postgresql://user:password@host:5432/dbname"
        )
    return driver + url[len(scheme) :]


def dialect_of(url: str) -> str:
    """``"sqlite"`` or ``"postgresql"``."""
    return "sqlite" if async_database_url(url).startswith("sqlite") else "postgresql"


def create_engine(
    url: str, *, busy_timeout: float = 30.0, pool_size: int = 5, echo: bool = False, must_exist: bool = False
) -> AsyncEngine:
    """An :class:`AsyncEngine` for ``url``.

    A SQLite file that does not exist yet is created readable by its owner only (the config DB holds
    targets, items and, on the embedded defaults, the broker's messages) -- unless ``must_exist``
    (commands that only read: a mistyped path must not silently become an empty database), which
    raises :class:`ConfigurationError` instead.

    SQLite: WAL journal, ``busy_timeout`` seconds of waiting for a lock, foreign keys on, and every
    transaction opened with ``BEGIN IMMEDIATE`` (the write lock is taken up front, so two writers
    never deadlock on a lock upgrade: that is what serialises the dispatch tick on SQLite).
    PostgreSQL: asyncpg. Both keep a pool of ``pool_size`` connections.
    """
    if busy_timeout < 0:
        raise ConfigurationError(f"busy_timeout must be >= 0, got {busy_timeout!r}")
    if pool_size < 1:
        raise ConfigurationError(f"pool_size must be >= 1, got {pool_size!r}")
    async_url = async_database_url(url)
    try:
        parsed = make_url(async_url)
    except ArgumentError as exc:
        raise ConfigurationError(f"cannot parse database URL {redact_url(url)!r}: {exc}") from None
    log.debug("config DB: %s", redact_url(url))
    if parsed.get_backend_name() == "sqlite":
        _prepare_sqlite_file(parsed.database, url, must_exist=must_exist)
        # a file is pooled as PostgreSQL is (SQLAlchemy's default keeps 5: a connection opened past the
        # pool is closed again when returned, and opening one starts a thread and sets its pragmas); an
        # in-memory database is one connection (SQLAlchemy's StaticPool), which takes no pool size
        in_memory = parsed.database in (None, "", ":memory:") or "mode=memory" in url
        pool: dict[str, int] = {} if in_memory else {"pool_size": pool_size, "max_overflow": max(pool_size, 10)}
        connect_args: dict[str, Any] = {"timeout": busy_timeout}
        if not in_memory:  # its calls on the loop's thread, waiting for a lock on their own (see _inline_sqlite)
            connect_args = {"async_creator_fn": inline_connect(busy_timeout)}
        engine = create_async_engine(parsed, echo=echo, connect_args=connect_args, **_JSON, **pool)
        _configure_sqlite(engine, busy_timeout)
        return engine
    timeouts, parsed = _timeouts(parsed, url)
    engine = create_async_engine(
        parsed, echo=echo, pool_size=pool_size, max_overflow=pool_size, connect_args=timeouts, **_JSON
    )
    _ping_when_idle(engine, PING_IDLE)
    _drop_timed_out(engine)
    return engine


#: The JSON columns' (items, website specs, job payloads) reader and writer: :mod:`crawlherd._json`.
_JSON: dict[str, Any] = {"json_serializer": _json.dumps, "json_deserializer": _json.loads}

#: A PostgreSQL config DB's client-side bounds, in seconds (the URL's ``?connect_timeout=`` and
#: ``?command_timeout=`` change them): a server that stops answering without closing the connection (a
#: network partition, a proxy that hangs) fails a connect or a statement after this long -- an outage,
#: said once and retried -- instead of holding the caller forever. Server-side timeouts cannot help there.
CONNECT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 120.0


def _timeouts(parsed: Any, url: str) -> tuple[dict[str, float], Any]:
    """asyncpg's ``timeout`` (connect) and ``command_timeout`` (every statement) from the URL's query
    (taken out of it: asyncpg knows neither name as a URL option), or the defaults."""
    query = dict(parsed.query)
    values: dict[str, float] = {}
    for name, default in (("connect_timeout", CONNECT_TIMEOUT), ("command_timeout", COMMAND_TIMEOUT)):
        raw = query.pop(name, None)
        try:
            value = default if raw is None else float(raw if isinstance(raw, str) else raw[-1])
        except ValueError:
            raise ConfigurationError(f"{name}={raw!r} in {redact_url(url)}: not a number of seconds") from None
        if value <= 0:
            raise ConfigurationError(f"{name}={raw!r} in {redact_url(url)}: must be > 0 seconds")
        values["timeout" if name == "connect_timeout" else name] = value
    return values, parsed.set(query=query)


def _drop_timed_out(engine: AsyncEngine) -> None:
    """A statement that ran out of ``command_timeout`` leaves its connection in an unknown state (the
    server may still answer it later): that connection is closed, not put back in the pool -- the others
    are kept (a timeout is not a disconnect of the server)."""

    @event.listens_for(engine.sync_engine, "handle_error")
    def _on_error(context: Any) -> None:
        error = context.original_exception
        for _ in range(8):  # the driver's error may be wrapped by the adapter's
            if error is None or isinstance(error, TimeoutError):
                break
            error = error.__cause__ or error.__context__
        if isinstance(error, TimeoutError):
            context.is_disconnect = True
            context.invalidate_pool_on_disconnect = False


#: A pooled PostgreSQL connection idle longer than this many seconds is pinged before it is used again.
PING_IDLE = 1.0


def _ping_when_idle(engine: AsyncEngine, idle: float) -> None:
    """Ping a pooled connection on checkout only when it has been idle for more than ``idle`` seconds:
    ``pool_pre_ping``'s round trip on every checkout was a worker's most frequent database call. A
    connection that died unseen (a server restarted while it sat in the pool) is found by the ping and
    replaced, as with ``pool_pre_ping``; one that dies while in use fails its statement as before
    (a disconnect: SQLAlchemy invalidates the pool, so the next checkouts connect afresh)."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_LAST_USED] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        last = record.info.get(_LAST_USED)
        if last is None or time.monotonic() - last <= idle:
            return  # new, or used a moment ago
        dialect = engine.sync_engine.dialect
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                # as pool_pre_ping does: every pooled connection older than now is replaced; the pool retries
                raise InvalidatePoolError(f"pooled connection found dead: {exc}") from exc
            raise


_LAST_USED = "crawlherd.last_used"


def _prepare_sqlite_file(database: str | None, url: str, *, must_exist: bool) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if path.exists():
        return
    if must_exist:
        raise ConfigurationError(
            f"no config DB at {path} ({redact_url(url)}): check the path (--database-url or "
            "CRAWLHERD_DATABASE_URL), or create it with `crawlherd db upgrade` or `crawlherd targets import FILE`"
        )
    if path.parent.exists():
        # SQLite gives its -wal and -shm files the permissions of the database file.
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def _configure_sqlite(engine: AsyncEngine, busy_timeout: float) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us emit BEGIN ourselves (pysqlite's implicit BEGIN is DEFERRED).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        if not isinstance(dbapi_connection.driver_connection, InlineConnection):  # that one waits on its thread
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    @event.listens_for(engine.sync_engine, "handle_error")
    def _on_error(context: Any) -> None:
        # the file's disk full: said with the file and what to do (the caller's outage, retried)
        if is_disk_full(context.original_exception):
            what = f"config DB {engine.url.database}"
            raise BackendUnavailableError(disk_full(what, context.original_exception), backend="database",
                                          role="database") from context.original_exception


async def db_now(conn: AsyncConnection) -> datetime:
    """The database's clock (UTC, aware): ``now()`` on PostgreSQL (the transaction's start),
    ``strftime('%f')`` on SQLite. The dispatcher uses this, never the local clock."""
    if sql_capabilities(conn).is_sqlite:
        raw = (await conn.execute(text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"))).scalar_one()
        return datetime.fromisoformat(raw).replace(tzinfo=UTC)
    value = (await conn.execute(text("SELECT now()"))).scalar_one()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


async def count_rows(conn: AsyncConnection, table: Any, *where: Any) -> int:
    """``SELECT count(*) FROM table WHERE ...`` (``table``: a model, or a join)."""
    return int((await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one() or 0)
