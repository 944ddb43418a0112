"""The tick and the relay on real SQLite and PostgreSQL, with the in-memory broker recording publishes."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.brokers.memory import MemoryBroker, MemoryBrokerOptions
from crawlherd.db import DispatchOutbox, ScrapeTarget, create_engine
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService
from crawlherd.dispatch.relay import Failure
from crawlherd.errors import BackendUnavailableError, ConfigurationError, MessageRejectedError
from crawlherd.messages import decode_job, idempotency_key
from tests.support.db import add_targets, add_website, database_now
from tests.support.dispatch import dispatch_due, relay_all

HOUR = timedelta(hours=1)


def recording() -> MemoryBroker:
    """The in-memory broker, listing every publish it confirmed in ``published``."""
    return MemoryBroker.from_url("memory://", record=True)


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
    dispatcher = DispatchService(engine, recording())
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
    await DispatchService(engine, recording()).tick()
    slots = [r.slot_at for r in await outbox(engine)]
    assert slots == [anchor + k * HOUR for k in range(6 - expected, 6)]
    assert (await targets(engine))[tid].next_run_at == anchor + 6 * HOUR


async def test_jitter_delays_the_run_but_not_the_slot(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    anchor = now - timedelta(minutes=30)
    await add_targets(engine, site, 1, every=HOUR, anchor=anchor, jitter_ms=20 * 60 * 1000, misfire="latest")
    await DispatchService(engine, recording()).tick()  # due: anchor + 20 min < now
    (row,) = await outbox(engine)
    assert row.slot_at == anchor
    (target,) = (await targets(engine)).values()
    assert target.next_run_at == anchor + HOUR + timedelta(minutes=20)
    (late,) = await add_targets(
        engine, site, 1, every=HOUR, anchor=now - timedelta(minutes=5), jitter_ms=10 * 60_000, keyword_prefix="j"
    )
    assert (await DispatchService(engine, recording()).tick()).targets == 0  # slot passed, jitter not yet


async def test_inactive_and_broken_targets(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    good, off, broken = await add_targets(engine, site, 3, every=HOUR, anchor=now - timedelta(seconds=10))
    async with engine.begin() as conn:
        await conn.execute(update(ScrapeTarget).where(ScrapeTarget.id == off).values(active=False))
        await conn.execute(
            update(ScrapeTarget).where(ScrapeTarget.id == broken).values(schedule_kind="cron", cron="not a cron")
        )
    result = await DispatchService(engine, recording()).tick()
    assert result.targets == 2 and result.inserted == 1  # the broken one is skipped, not fatal
    assert [r.target_id for r in await outbox(engine)] == [good]
    rows = await targets(engine)
    assert rows[broken].next_run_at > now + timedelta(minutes=50)  # retried later, not in a hot loop
    assert rows[off].last_scheduled is None


async def test_relay_publishes_each_row_once_with_its_key(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 30, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = recording()
    dispatcher = DispatchService(engine, broker, DispatchOptions(relay_batch=7))
    tick, relay = await dispatcher.run_once()
    assert tick.inserted == 30 and relay.published == 30 and relay.failed == 0
    rows = await outbox(engine)
    assert all(r.status == "published" and r.published_at is not None for r in rows)
    assert sorted(k for k, _ in broker.published) == sorted(r.key for r in rows)
    for key, body in broker.published:
        assert decode_job(body).idempotency_key == key
    assert (await dispatcher.relay()).leased == 0


async def test_broker_down_mid_dispatch_rows_wait_then_all_are_delivered(engine: AsyncEngine) -> None:
    """Must-show 2 (against the memory broker's fault switch): publishes fail, rows wait in the outbox, none lost."""
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 40, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = recording()
    broker.set_down(after=15)  # the broker goes away in the middle of the batch
    dispatcher = DispatchService(
        engine,
        broker,
        DispatchOptions(backoff=3600.0, max_backoff=7200.0, publish_concurrency=1),
    )
    tick, relay = await dispatcher.run_once()
    assert tick.inserted == 40 and relay.published == 15 and relay.failed == 25
    rows = await outbox(engine)
    waiting = [r for r in rows if r.status == "pending"]
    assert len(waiting) == 25
    assert all(r.last_error and "down" in r.last_error and r.attempts == 1 for r in waiting)
    assert all(r.leased_until is not None and r.leased_until > now + timedelta(minutes=30) for r in waiting)
    assert (await dispatcher.relay()).leased == 0  # backing off, not hammering the broker
    broker.set_down(False)
    async with engine.begin() as conn:  # let the backoff run out (instead of waiting an hour)
        await conn.execute(update(DispatchOutbox).values(leased_until=now))
    assert (await relay_all(dispatcher)).published == 25
    assert Counter(k for k, _ in broker.published) == {r.key: 1 for r in rows}  # all, each once
    assert all(r.status == "published" for r in await outbox(engine))


async def test_backoff_grows_and_is_capped(engine: AsyncEngine) -> None:
    dispatcher = DispatchService(engine, recording(), DispatchOptions(backoff=2.0, max_backoff=60.0))
    assert [dispatcher.relayer.backoff_for(a) for a in (1, 2, 3, 6, 50)] == [2.0, 4.0, 8.0, 60.0, 60.0]


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
        broker = recording()
        dispatchers = [DispatchService(e, broker, DispatchOptions(batch_size=17, relay_batch=23)) for e in engines]
        ticks = await asyncio.gather(*(dispatch_due(d) for d in dispatchers))
        assert sum(t.targets for t in ticks) == 120 and sum(t.inserted for t in ticks) == 360
        relays = await asyncio.gather(*(relay_all(d) for d in dispatchers))
        assert sum(r.published for r in relays) == 360
        counts = Counter(k for k, _ in broker.published)
        assert len(counts) == 360 and set(counts.values()) == {1}
        async with engines[0].connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(DispatchOutbox))).scalar_one() == 360
    finally:
        for e in engines:
            await e.dispose()


async def test_cancelled_relay_marks_what_was_confirmed_keeps_what_was_in_flight_and_releases_the_rest(
    engine: AsyncEngine,
) -> None:
    """A publish cut off in flight may have reached the broker: its row keeps the stopped relay's lease
    (published again once that runs out, as after a crash), where releasing it would let another relay
    publish it again at once -- a duplicate of a publish that went through."""
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 10, every=HOUR, anchor=now - timedelta(seconds=10))
    dispatcher = DispatchService(engine, recording(), DispatchOptions(publish_concurrency=1))
    await dispatch_due(dispatcher)

    stalled = asyncio.Event()

    class Stalling(MemoryBroker):
        async def publish(self, body: bytes, **kw: object) -> None:  # type: ignore[override]
            if len(self.published) == 4:
                stalled.set()
                await asyncio.Event().wait()  # hangs: the shutdown cancels it
            await super().publish(body, **kw)  # type: ignore[arg-type]

    stalling = Stalling(options=MemoryBrokerOptions(record=True))
    relay = asyncio.create_task(DispatchService(engine, stalling, DispatchOptions(publish_concurrency=1)).relay())
    await asyncio.wait_for(stalled.wait(), 30)
    relay.cancel()
    with pytest.raises(asyncio.CancelledError):
        await relay
    rows = await outbox(engine)
    published = {r.key for r in rows if r.status == "published"}
    assert published == {k for k, _ in stalling.published}
    pending = [r for r in rows if r.status == "pending"]
    assert len(pending) == 6
    held = [r for r in pending if r.lease_owner is not None]
    assert len(held) == 1 and held[0].leased_until > await database_now(engine)  # the one in flight
    assert (await dispatcher.relay()).published == 5  # the rest released at once, not after the lease


def test_options_are_validated() -> None:
    for bad in ({"batch_size": 0}, {"lease": 0}, {"publish_concurrency": -1}, {"backoff": -1.0},
                {"relay_rounds": 1.5}, {"heartbeat_interval": 0}, {"round_timeout": 59}):
        (name, value), = bad.items()
        with pytest.raises(ConfigurationError, match=f"{name}|round deadline"):
            DispatchOptions(**bad)  # type: ignore[arg-type]
    assert DispatchOptions(heartbeat_interval=None).heartbeat_interval is None


async def test_message_body_is_stable_across_republish(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 1, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = recording()
    dispatcher = DispatchService(engine, broker)
    await dispatcher.run_once()
    async with engine.begin() as conn:  # as if the mark had been lost
        await conn.execute(update(DispatchOutbox).values(status="pending", leased_until=now))
    await relay_all(dispatcher)
    (first_key, first), (second_key, second) = broker.published
    assert first_key == second_key and first == second
    assert json.loads(first)["job_id"] == json.loads(second)["job_id"]


async def test_a_dispatcher_whose_lease_ran_out_does_not_touch_the_new_owners_lease(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 1, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = recording()
    broker.set_down()
    slow = DispatchService(engine, broker, DispatchOptions(lease=30.0, owner="slow"))
    await dispatch_due(slow)
    (leased,) = await slow.relayer.lease()
    async with engine.begin() as conn:  # slow's lease ran out; "fast" leased the row meanwhile
        await conn.execute(update(DispatchOutbox).values(lease_owner="fast", leased_until=now + timedelta(minutes=5)))
    await slow.relayer.settle([], [Failure(leased, "broker down")], [])
    (row,) = await outbox(engine)
    assert row.lease_owner == "fast" and row.leased_until == now + timedelta(minutes=5) and row.last_error is None


async def test_a_tick_that_fails_midway_leaves_nothing_and_the_next_tick_redoes_it(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 5, every=HOUR, anchor=now - timedelta(seconds=10))
    dispatcher = DispatchService(engine, recording())
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


class HungBroker(MemoryBroker):
    """A broker that accepts the connection and never confirms (a partition, a blocked broker)."""

    async def publish(self, body: bytes, **kw: object) -> None:  # type: ignore[override]
        await asyncio.Event().wait()


async def test_a_hung_broker_does_not_stop_the_tick_and_each_round_ends_at_its_deadline(engine: AsyncEngine) -> None:
    """The tick and the relay are independent loops: with every publish hanging, due targets are still
    claimed into the outbox, and each relay round gives up at its deadline with the reason on the row."""
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 5, every=HOUR, anchor=now - timedelta(seconds=10))
    service = DispatchService(
        engine,
        HungBroker(),
        DispatchOptions(lease=2.0, round_timeout=0.5, publish_timeout=60.0),
    )
    stop = asyncio.Event()
    runner = asyncio.create_task(service.run(interval=0.05, stop=stop))
    try:
        for _ in range(400):  # bounded wait for the loops to get there, not a timing assertion
            rows = await outbox(engine)
            if len(rows) == 5 and all(r.last_error for r in rows):
                break
            await asyncio.sleep(0.05)
        # Second batch of targets falls due while the broker still hangs: claimed all the same.
        await add_targets(engine, site, 3, every=HOUR, anchor=now - timedelta(seconds=5), keyword_prefix="late")
        for _ in range(400):
            rows = await outbox(engine)
            if len(rows) == 8:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(runner, 30)
    assert len(rows) == 8 and all(r.status == "pending" for r in rows)
    assert any(r.last_error and "deadline" in r.last_error for r in rows)
    assert service.relayer.last_error is not None and "deadline" in service.relayer.last_error


def test_the_relay_round_must_fit_in_the_outbox_lease() -> None:
    engine = create_engine("sqlite:///:memory:")
    with pytest.raises(ConfigurationError, match="at most 80% of the outbox lease"):
        DispatchService(engine, recording(), DispatchOptions(lease=10.0, round_timeout=9.0))


class RefusingBroker(MemoryBroker):
    """A broker that answers and refuses every message (as RabbitMQ returns an unroutable one)."""

    async def publish(self, body: bytes, **kw: object) -> None:  # type: ignore[override]
        raise MessageRejectedError("returned as unroutable (no queue 'jobs')")


async def test_a_row_the_broker_keeps_refusing_goes_dead_with_its_reason(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 2, every=HOUR, anchor=now - timedelta(seconds=10))
    service = DispatchService(engine, RefusingBroker(), DispatchOptions(dead_after=3, backoff=0.0))
    await dispatch_due(service)
    for attempt in range(1, 4):
        result = await service.relay()
        assert result.failed == 2
        rows = await outbox(engine)
        expected = "dead" if attempt == 3 else "pending"
        assert all(r.status == expected and r.attempts == attempt for r in rows), (attempt, rows)
    assert all("unroutable" in (r.last_error or "") and r.leased_until is None for r in rows)
    assert (await service.relay()).leased == 0  # dead rows are never leased again


async def test_an_outage_never_kills_a_row(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 1, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = recording()
    broker.set_down(True)
    service = DispatchService(engine, broker, DispatchOptions(dead_after=2, backoff=0.0))
    await dispatch_due(service)
    for _ in range(5):
        assert (await service.relay()).failed == 1
    (row,) = await outbox(engine)
    assert row.status == "pending" and row.attempts == 5
    broker.set_down(False)
    assert (await service.relay()).published == 1


async def test_published_rows_are_pruned_after_the_retention(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    await add_targets(engine, site, 6, every=HOUR, anchor=now - timedelta(seconds=10))
    service = DispatchService(engine, recording())
    await service.run_once()
    rows = await outbox(engine)
    old, recent = [r.id for r in rows[:4]], [r.id for r in rows[4:]]
    async with engine.begin() as conn:
        await conn.execute(
            update(DispatchOutbox).where(DispatchOutbox.id.in_(old)).values(published_at=now - timedelta(days=8))
        )
        # A pending row, however old, is never pruned.
        await conn.execute(
            update(DispatchOutbox)
            .where(DispatchOutbox.id == recent[0])
            .values(status="pending", published_at=None, created_at=now - timedelta(days=30))
        )
    assert await service.relayer.prune(timedelta(days=7), chunk=3) == 4
    assert sorted(r.id for r in await outbox(engine)) == sorted(recent)
