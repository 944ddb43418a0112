"""The config DB's PostgreSQL pool pings a connection on checkout only when it sat idle (no
``pool_pre_ping`` round trip per checkout): a pooled connection that died while idle -- its server
killed by its PID and started again -- is found and replaced, so the next statement succeeds; one used
a moment ago is handed out without a ping."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text

import crawlherd.db.engine as db_engine
from crawlherd.db import create_engine
from tests.support.private_postgres import PrivatePostgres

pytestmark = [pytest.mark.postgres]


async def _backend_pid(engine: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


@pytest.mark.timeout(120)
async def test_a_pooled_connection_dead_after_a_restart_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_engine, "PING_IDLE", 0.0)  # every pooled connection counts as idle: no sleeping
    pg = PrivatePostgres()
    await asyncio.to_thread(pg.start)
    engine = create_engine(pg.url, pool_size=1)
    try:
        before = await _backend_pid(engine)
        await asyncio.to_thread(pg.kill)
        await asyncio.to_thread(pg.start)
        after = await _backend_pid(engine)  # without the ping: "connection was closed in the middle of operation"
        assert after != before
        assert await _backend_pid(engine) == after  # the new connection is pooled and kept
    finally:
        await engine.dispose()
        await asyncio.to_thread(pg.stop)


async def test_a_connection_used_a_moment_ago_is_not_pinged(postgres_url: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_engine, "PING_IDLE", 3600.0)
    engine = create_engine(postgres_url, pool_size=1)
    pings = 0
    dialect = engine.sync_engine.dialect
    ping = dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        nonlocal pings
        pings += 1
        return ping(dbapi_connection)

    monkeypatch.setattr(dialect, "do_ping", counted)
    try:
        first = await _backend_pid(engine)
        for _ in range(5):
            assert await _backend_pid(engine) == first
        assert pings == 0  # pool_pre_ping would have pinged on each of these checkouts
    finally:
        await engine.dispose()
