"""The tick's claim and the relay's lease can use their partial indexes (their cost grows with the
due targets / ready rows, not with the table): the statements really sent are EXPLAINed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers.memory import MemoryBroker
from crawlherd.db import db_now
from crawlherd.dispatch import outbox
from crawlherd.dispatch.relay import Relay


async def plan_of(engine: AsyncEngine, marker: str, run: Callable[[], Awaitable[Any]]) -> str:
    """The query plan of the first statement containing ``marker`` that ``run`` sends (sequential
    scans disabled on PostgreSQL, so that the plan shows whether the index can be used at all)."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if marker in statement:
            seen.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", capture)
    try:
        await run()
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", capture)
    statement, parameters = seen[0]
    async with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            rows = (await conn.exec_driver_sql("EXPLAIN " + statement, parameters)).all()
        else:
            rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)).all()
    return "\n".join(" ".join(str(c) for c in row) for row in rows)


async def test_the_claim_uses_the_due_index(engine: AsyncEngine) -> None:
    async def claim() -> None:
        async with engine.begin() as conn:
            await outbox.claim_due(conn, now=await db_now(conn), limit=1000)

    plan = await plan_of(engine, "ORDER BY scrape_targets.next_run_at", claim)
    assert "ix_scrape_targets_due" in plan, plan


async def test_the_lease_and_the_pruning_use_their_outbox_indexes(engine: AsyncEngine) -> None:
    relay = Relay(engine, MemoryBroker())
    plan = await plan_of(engine, "dispatch_outbox.leased_until <=", relay.lease)
    assert "ix_dispatch_outbox_pending" in plan, plan
    plan = await plan_of(engine, "dispatch_outbox.published_at <", lambda: relay.prune(relay.lease_time))
    assert "ix_dispatch_outbox_published" in plan, plan
