"""Engines for the config DB: SQLite (aiosqlite, WAL, busy timeout, ``BEGIN IMMEDIATE``) or PostgreSQL
(asyncpg). Users give plain URLs (``sqlite:///path``, ``postgresql://user@host/db``); they are mapped to
the async drivers here, and never logged with their secrets.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from crawlherd._redact import redact_url
from crawlherd.errors import ConfigurationError

__all__ = ["async_database_url", "create_engine", "db_now", "dialect_of"]

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


def create_engine(url: str, *, busy_timeout: float = 30.0, pool_size: int = 5, echo: bool = False) -> AsyncEngine:
    """An :class:`AsyncEngine` for ``url``.

    SQLite: WAL journal, ``busy_timeout`` seconds of waiting for a lock, foreign keys on, and every
    transaction opened with ``BEGIN IMMEDIATE`` (the write lock is taken up front, so two writers
    never deadlock on a lock upgrade: that is what serialises the dispatch tick on SQLite).
    PostgreSQL: asyncpg with a pool of ``pool_size``.
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
        engine = create_async_engine(parsed, echo=echo, connect_args={"timeout": busy_timeout})
        _configure_sqlite(engine, busy_timeout)
        return engine
    return create_async_engine(parsed, echo=echo, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


def _configure_sqlite(engine: AsyncEngine, busy_timeout: float) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us emit BEGIN ourselves (pysqlite's implicit BEGIN is DEFERRED).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


async def db_now(conn: AsyncConnection) -> datetime:
    """The database's clock (UTC, aware): ``now()`` on PostgreSQL (the transaction's start),
    ``strftime('%f')`` on SQLite. The dispatcher uses this, never the local clock."""
    if conn.dialect.name == "sqlite":
        raw = (await conn.execute(text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"))).scalar_one()
        return datetime.fromisoformat(raw).replace(tzinfo=UTC)
    value = (await conn.execute(text("SELECT now()"))).scalar_one()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)
