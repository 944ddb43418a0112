"""The tick hands its rows to the relay already leased (PostgreSQL): the relay publishes them without
a lease of its own, never more than one batch per relay round, and gives back what it did not take."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers.memory import MemoryBroker, MemoryBrokerOptions
from crawlherd.db import DispatchOutbox
from crawlherd.db.models import OutboxTrail
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService, Handoff
from tests.support.db import add_targets, add_website, database_now

HOUR = timedelta(hours=1)
# PostgreSQL only: on SQLite the tick writes its rows unleased (the relay leases them as ever).
pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)]


async def due_targets(engine: AsyncEngine, n: int) -> datetime:
    """``n`` targets with one due slot each; the database's now."""
    now = await database_now(engine)
    await add_targets(engine, await add_website(engine), n, every=HOUR, anchor=now - timedelta(seconds=10))
    return now


async def outbox_rows(engine: AsyncEngine) -> dict[int, Any]:
    async with engine.connect() as conn:
        return {r.id: r for r in (await conn.execute(select(DispatchOutbox.__table__))).all()}


async def test_the_tick_writes_its_rows_leased_and_the_relay_publishes_them_as_they_are(engine: AsyncEngine) -> None:
    now = await due_targets(engine, 30)
    broker = MemoryBroker(options=MemoryBrokerOptions(record=True))
    service = DispatchService(
        engine,
        broker,
        DispatchOptions(batch_size=10, relay_batch=10, relay_rounds=2, lease=60.0),
    )
    handoff = Handoff(service.options.relay_rounds)
    ticks = [await service.tick(handoff) for _ in range(3)]
    assert [len(t.leased) for t in ticks] == [10, 10, 0]  # the third found no room: written unleased
    rows = await outbox_rows(engine)
    leased = {r.id for t in ticks for r in t.leased}
    for row in rows.values():
        if row.id in leased:
            assert row.lease_owner == service.owner and row.attempts == 1
            assert row.leased_until >= now + timedelta(seconds=50)
        else:
            assert row.lease_owner is None and row.attempts == 0
    # A lease round finds only the unleased rows; the handed ones are published from the hand-over.
    first = await service.relay(handoff)
    assert (first.leased, first.published) == (10, 10)
    rest = [await service.relay(handoff) for _ in range(3)]
    assert [r.published for r in rest] == [10, 10, 0]
    rows = await outbox_rows(engine)
    assert all(r.status == "published" and r.attempts == 1 for r in rows.values())
    assert Counter(k for k, _ in broker.published) == {r.key: 1 for r in rows.values()}
    async with engine.connect() as conn:
        trail = (await conn.execute(select(OutboxTrail.__table__))).all()
    assert {t.outbox_id for t in trail} == set(rows)
    assert all(t.claimed_by == t.published_by == service.owner for t in trail)


async def test_more_rows_than_a_relay_round_are_not_handed_over(engine: AsyncEngine) -> None:
    await due_targets(engine, 12)
    service = DispatchService(engine, MemoryBroker(), DispatchOptions(batch_size=12, relay_batch=10))
    handoff = Handoff(service.options.relay_rounds)
    tick = await service.tick(handoff)
    assert tick.inserted == 12 and not tick.leased and not handoff
    assert all(r.lease_owner is None for r in (await outbox_rows(engine)).values())


async def test_rows_no_round_took_are_given_back_at_once(engine: AsyncEngine) -> None:
    await due_targets(engine, 5)
    service = DispatchService(engine, MemoryBroker(), DispatchOptions(batch_size=5, relay_batch=5))
    handoff = Handoff(service.options.relay_rounds)
    await service.tick(handoff)
    assert handoff
    await handoff.release(service.relayer)
    assert not handoff
    rows = await outbox_rows(engine)
    assert all(r.lease_owner is None and r.status == "pending" for r in rows.values())
    assert (await service.relay()).published == 5  # any relay takes them now, not a lease later


async def test_the_round_deadline_counts_from_the_lease_not_from_the_hand_over(engine: AsyncEngine) -> None:
    await due_targets(engine, 5)
    broker = MemoryBroker(options=MemoryBrokerOptions(record=True))
    service = DispatchService(
        engine,
        broker,
        DispatchOptions(batch_size=5, relay_batch=5, lease=10.0, round_timeout=8.0),
    )
    handoff = Handoff(service.options.relay_rounds)
    tick = await service.tick(handoff)
    handed = handoff.take()
    assert handed is not None and handed[1] == tick.leased
    # Handed over 9 s after its lease began (past the 8 s round deadline): nothing is published.
    stale = asyncio.get_running_loop().time() - 9.0
    result = await service.relayer.run_round(handed[1], leased_at=stale)
    assert result.published == 0 and not broker.published
    rows = await outbox_rows(engine)
    assert all(r.status == "pending" for r in rows.values())


async def test_run_once_hands_over_and_publishes_every_slot_once(engine: AsyncEngine) -> None:
    await due_targets(engine, 95)
    broker = MemoryBroker(options=MemoryBrokerOptions(record=True))
    tick, relay = await DispatchService(engine, broker, DispatchOptions(batch_size=10, relay_batch=10)).run_once()
    assert tick.inserted == relay.published == 95 and relay.failed == 0
    rows = await outbox_rows(engine)
    assert all(r.status == "published" and r.attempts == 1 for r in rows.values())
    assert Counter(k for k, _ in broker.published) == {r.key: 1 for r in rows.values()}
