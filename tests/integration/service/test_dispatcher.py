"""The tick and the relay on real SQLite and PostgreSQL, with the in-memory broker double."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db import DispatchOutbox, ScrapeTarget, create_engine
from crawlherd.errors import BackendUnavailableError, ConfigurationError
from crawlherd.messages import decode_job, idempotency_key
from crawlherd.service.dispatch_service import DispatchService
from tests.support.db import add_targets, add_website, database_now
from tests.support.memory_broker import MemoryBrokerDouble

HOUR = timedelta(hours=1)


async def outbox(engine: AsyncEngine) -> list[DispatchOutbox]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(DispatchOutbox.__table__).order_by(DispatchOutbox.id))).all()
    return rows  # type: ignore[return-value]


async def targets(engine: AsyncEngine) -> dict[int, ScrapeTarget]:
    async with engine.connect() as conn:
        return {r.id: r for r in (await conn.execute(select(ScrapeTarget.__table__))).all()}  # type: ignore[misc]


async def test_tick_writes_each_slot_once_and_advances_from_the_slot(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    # Slots at now-3.5h, -2.5h, -1.5h, -0.5h (all late), next at now+0.5h.
    anchor = now - timedelta(hours=3, minutes=30)
    ids = await add_targets(engine, site, 3, every=HOUR, anchor=anchor, misfire="backfill", backfill_limit=10)
    dispatcher = DispatchService(engine, MemoryBrokerDouble())
    result = await dispatcher.tick()
    assert (result.targets, result.slots, result.inserted) == (3, 12, 12)
    rows = await outbox(engine)
    assert Counter(r.target_id for r in rows) == {i: 4 for i in ids}
    assert {r.slot_at for r in rows} == {anchor + k * HOUR for k in range(4)}
    assert all(r.status == "pending" and r.attempts == 0 for r in rows)
    for target in (await targets(engine)).values():
        assert target.next_run_at == anchor + 4 * HOUR  # anchored to the slot grid, not to "now"
        assert target.last_scheduled == anchor + 3 * HOUR
    assert (await dispatcher.tick()).targets == 0  # nothing due any more
    body = decode_job(rows[0].body)
    assert body.idempotency_key == rows[0].key == idempotency_key(rows[0].target_id, rows[0].slot_at)
    number = ids.index(rows[0].target_id)
    assert body.search_url == f"https://jobs.example.com/search?q=kw+{number}&l=Berlin"
    assert body.schema_version == 2 and body.site.name == "site"  # the website's SiteSpec, typed
    assert body.site.politeness.model_dump() == {"min_delay": 1.0, "max_concurrency": 2, "robots": "obey"}


@pytest.mark.parametrize(("policy", "limit", "expected"), [("skip", 0, 0), ("latest", 0, 1), ("backfill", 2, 2)])
async def test_misfire_policies_after_downtime(engine: AsyncEngine, policy: str, limit: int, expected: int) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    anchor = now - timedelta(hours=5, minutes=30)
    (tid,) = await add_targets(engine, site, 1, every=HOUR, anchor=anchor, misfire=policy, backfill_limit=limit)
    await DispatchService(engine, MemoryBrokerDouble()).tick()
    slots = [r.slot_at for r in await outbox(engine)]
    assert slots == [anchor + k * HOUR for k in range(6 - expected, 6)]
    assert (await targets(engine))[tid].next_run_at == anchor + 6 * HOUR


async def test_jitter_delays_the_run_but_not_the_slot(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    anchor = now - timedelta(minutes=30)
    await add_targets(engine, site, 1, every=HOUR, anchor=anchor, jitter_ms=20 * 60 * 1000, misfire="latest")
    await DispatchService(engine, MemoryBrokerDouble()).tick()  # due: anchor + 20 min < now
    (row,) = await outbox(engine)
    assert row.slot_at == anchor
    (target,) = (await targets(engine)).values()
    assert target.next_run_at == anchor + HOUR + timedelta(minutes=20)
    (late,) = await add_targets(
        engine, site, 1, every=HOUR, anchor=now - timedelta(minutes=5), jitter_ms=10 * 60_000, keyword_prefix="j"
    )
    assert (await DispatchService(engine, MemoryBrokerDouble()).tick()).targets == 0  # slot passed, jitter not yet


async def test_inactive_and_broken_targets(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    good, off, broken = await add_targets(engine, site, 3, every=HOUR, anchor=now - timedelta(seconds=10))
    async with engine.begin() as conn:
        await conn.execute(update(ScrapeTarget).where(ScrapeTarget.id == off).values(active=False))
        await conn.execute(
            update(ScrapeTarget).where(ScrapeTarget.id == broken).values(schedule_kind="cron", cron="not a cron")
        )
    result = await DispatchService(engine, MemoryBrokerDouble()).tick()
    assert result.targets == 2 and result.inserted == 1  # the broken one is skipped, not fatal
    assert [r.target_id for r in await outbox(engine)] == [good]
    rows = await targets(engine)
    assert rows[broken].next_run_at > now + timedelta(minutes=50)  # retried later, not in a hot loop
    assert rows[off].last_scheduled is None


async def test_relay_publishes_each_row_once_with_its_key(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 30, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = MemoryBrokerDouble()
    dispatcher = DispatchService(engine, broker, relay_batch=7)
    tick, relay = await dispatcher.run_once()
    assert tick.inserted == 30 and relay.published == 30 and relay.failed == 0
    rows = await outbox(engine)
    assert all(r.status == "published" and r.published_at is not None for r in rows)
    assert sorted(k for k, _ in broker.published) == sorted(r.key for r in rows)
    for key, body in broker.published:
        assert decode_job(body).idempotency_key == key
    assert (await dispatcher.relay()).leased == 0


async def test_broker_down_mid_dispatch_rows_wait_then_all_are_delivered(engine: AsyncEngine) -> None:
    """Must-show 2 (against the broker double): publishes fail, rows wait in the outbox, none lost."""
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 40, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = MemoryBrokerDouble()
    broker.fail_after = 15  # the broker goes away in the middle of the batch
    dispatcher = DispatchService(engine, broker, backoff=3600.0, max_backoff=7200.0, publish_concurrency=1)
    tick, relay = await dispatcher.run_once()
    assert tick.inserted == 40 and relay.published == 15 and relay.failed == 25
    rows = await outbox(engine)
    waiting = [r for r in rows if r.status == "pending"]
    assert len(waiting) == 25
    assert all(r.last_error and "down" in r.last_error and r.attempts == 1 for r in waiting)
    assert all(r.leased_until is not None and r.leased_until > now + timedelta(minutes=30) for r in waiting)
    assert (await dispatcher.relay()).leased == 0  # backing off, not hammering the broker
    broker.down = False
    async with engine.begin() as conn:  # let the backoff run out (instead of waiting an hour)
        await conn.execute(update(DispatchOutbox).values(leased_until=now))
    assert (await dispatcher.relay_all()).published == 25
    assert Counter(k for k, _ in broker.published) == {r.key: 1 for r in rows}  # all, each once
    assert all(r.status == "published" for r in await outbox(engine))


async def test_backoff_grows_and_is_capped(engine: AsyncEngine) -> None:
    dispatcher = DispatchService(engine, MemoryBrokerDouble(), backoff=2.0, max_backoff=60.0)
    assert [dispatcher._backoff(a) for a in (1, 2, 3, 6, 50)] == [2.0, 4.0, 8.0, 60.0, 60.0]


async def test_concurrent_dispatchers_write_and_publish_each_slot_once(db_url: str) -> None:
    engines = [create_engine(db_url) for _ in range(4)]
    try:
        now = await database_now(engines[0])
        site = await add_website(engines[0])
        await add_targets(
            engines[0],
            site,
            120,
            every=HOUR,
            anchor=now - timedelta(hours=2, minutes=30),
            misfire="backfill",
            backfill_limit=5,
        )
        broker = MemoryBrokerDouble()
        dispatchers = [DispatchService(e, broker, batch_size=17, relay_batch=23) for e in engines]
        ticks = await asyncio.gather(*(d.dispatch_due() for d in dispatchers))
        assert sum(t.targets for t in ticks) == 120 and sum(t.inserted for t in ticks) == 360
        relays = await asyncio.gather(*(d.relay_all() for d in dispatchers))
        assert sum(r.published for r in relays) == 360
        counts = Counter(k for k, _ in broker.published)
        assert len(counts) == 360 and set(counts.values()) == {1}
        async with engines[0].connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(DispatchOutbox))).scalar_one() == 360
    finally:
        for e in engines:
            await e.dispose()


async def test_cancelled_relay_marks_what_was_confirmed_and_releases_the_rest(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 10, every=HOUR, anchor=now - timedelta(seconds=10))
    dispatcher = DispatchService(engine, MemoryBrokerDouble(), publish_concurrency=1)
    await dispatcher.dispatch_due()

    stalled = asyncio.Event()

    class Stalling(MemoryBrokerDouble):
        async def publish(self, body: bytes, **kw: object) -> None:  # type: ignore[override]
            if len(self.published) == 4:
                stalled.set()
                await asyncio.Event().wait()  # hangs: the shutdown cancels it
            await super().publish(body, **kw)  # type: ignore[arg-type]

    stalling = Stalling()
    relay = asyncio.create_task(DispatchService(engine, stalling, publish_concurrency=1).relay())
    await asyncio.wait_for(stalled.wait(), 30)
    relay.cancel()
    with pytest.raises(asyncio.CancelledError):
        await relay
    rows = await outbox(engine)
    published = {r.key for r in rows if r.status == "published"}
    assert published == {k for k, _ in stalling.published}
    pending = [r for r in rows if r.status == "pending"]
    assert len(pending) == 6 and all(r.lease_owner is None for r in pending)
    assert (await dispatcher.relay()).published == 6  # released at once, not after the lease


def test_options_are_validated() -> None:
    engine = create_engine("sqlite:///:memory:")
    for bad in ({"batch_size": 0}, {"lease": 0}, {"publish_concurrency": -1}, {"backoff": -1.0}):
        with pytest.raises(ConfigurationError):
            DispatchService(engine, MemoryBrokerDouble(), **bad)  # type: ignore[arg-type]


async def test_message_body_is_stable_across_republish(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 1, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = MemoryBrokerDouble()
    dispatcher = DispatchService(engine, broker)
    await dispatcher.run_once()
    async with engine.begin() as conn:  # as if the mark had been lost
        await conn.execute(update(DispatchOutbox).values(status="pending", leased_until=now))
    await dispatcher.relay_all()
    (first_key, first), (second_key, second) = broker.published
    assert first_key == second_key and first == second
    assert json.loads(first)["job_id"] == json.loads(second)["job_id"]


async def test_a_dispatcher_whose_lease_ran_out_does_not_touch_the_new_owners_lease(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 1, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = MemoryBrokerDouble()
    broker.down = True
    slow = DispatchService(engine, broker, lease=30.0, owner="slow")
    await slow.dispatch_due()
    (leased,) = await slow._lease()
    async with engine.begin() as conn:  # slow's lease ran out; "fast" leased the row meanwhile
        await conn.execute(update(DispatchOutbox).values(lease_owner="fast", leased_until=now + timedelta(minutes=5)))
    await slow._settle([], [(leased, "broker down")], [])
    (row,) = await outbox(engine)
    assert row.lease_owner == "fast" and row.leased_until == now + timedelta(minutes=5) and row.last_error is None


async def test_a_tick_that_fails_midway_leaves_nothing_and_the_next_tick_redoes_it(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 5, every=HOUR, anchor=now - timedelta(seconds=10))
    dispatcher = DispatchService(engine, MemoryBrokerDouble())
    real_execute = AsyncConnection.execute

    async def crash_on_advance(self: AsyncConnection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(statement, "is_update", False) and "scrape_targets" in str(statement):
            raise OSError("connection reset by peer")  # after the outbox INSERT, before the commit
        return await real_execute(self, statement, *args, **kwargs)

    monkeypatch.setattr(AsyncConnection, "execute", crash_on_advance)
    with pytest.raises(BackendUnavailableError, match="during the tick"):
        await dispatcher.tick()
    monkeypatch.setattr(AsyncConnection, "execute", real_execute)
    assert await outbox(engine) == []  # the outbox rows went with the rolled-back transaction
    assert all(t.last_scheduled is None for t in (await targets(engine)).values())
    assert (await dispatcher.tick()).inserted == 5
