"""The relay's batch path (brokers with ``publish_many``): per-message results, and Redis pipelines."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.brokers.memory import MemoryBroker, MemoryBrokerOptions
from crawlherd.db import DispatchOutbox
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService
from crawlherd.dispatch.relay import JOB_HEADERS, BatchPublisher
from crawlherd.errors import MessageRejectedError
from crawlherd.messages import decode_job
from tests.support.db import add_targets, add_website, database_now
from tests.support.dispatch import dispatch_due
from tests.support.real_brokers import drain, keys_of, remove

HOUR = timedelta(hours=1)


class BatchDouble(MemoryBroker):
    """A batch-publishing double that refuses the messages of one target and records each batch size."""

    def __init__(self, refuse_target: int) -> None:
        super().__init__(options=MemoryBrokerOptions(record=True))
        self.refuse = f"{refuse_target}:"
        self.batches: list[int] = []

    async def publish_many(
        self, messages: Sequence[tuple[bytes, str, Mapping[str, str] | None]]
    ) -> list[Exception | None]:
        self.batches.append(len(messages))
        results: list[Exception | None] = []
        for body, key, headers in messages:
            if key.startswith(self.refuse):
                results.append(MessageRejectedError("no route"))
            else:
                await self.publish(body, key=key, headers=headers)
                results.append(None)
        return results


async def test_a_batch_settles_each_message_by_its_own_result(engine: AsyncEngine) -> None:
    now = await database_now(engine)
    site = await add_website(engine)
    ids = await add_targets(engine, site, 25, every=HOUR, anchor=now - timedelta(seconds=10))
    broker = BatchDouble(refuse_target=ids[3])
    assert isinstance(broker, BatchPublisher)
    service = DispatchService(
        engine,
        broker,
        DispatchOptions(relay_batch=20, publish_concurrency=8, backoff=3600.0),
    )
    await dispatch_due(service)
    first = await service.relay()  # rows of 20, in batches of publish_concurrency (8)
    assert (first.leased, first.published, first.failed) == (20, 19, 1)
    assert broker.batches == [8, 8, 4]
    second = await service.relay()
    assert (second.leased, second.published, second.failed) == (5, 5, 0)
    assert (await service.relay()).leased == 0  # the refused row waits for its back-off
    async with engine.connect() as conn:
        rows = {r.target_id: r for r in (await conn.execute(select(DispatchOutbox.__table__))).all()}
    assert rows[ids[3]].status == "pending" and "no route" in rows[ids[3]].last_error
    assert all(r.status == "published" for t, r in rows.items() if t != ids[3])
    assert Counter(k for k, _ in broker.published) == {r.key: 1 for t, r in rows.items() if t != ids[3]}


async def test_redis_relay_pipelines_every_row_once(engine: AsyncEngine, redis_url: str) -> None:
    name = f"relaybatch{uuid.uuid4().hex[:8]}"
    url = f"{redis_url}?prefix={name}"
    try:
        now = await database_now(engine)
        site = await add_website(engine, name=name)
        await add_targets(engine, site, 1200, every=HOUR, anchor=now - timedelta(seconds=10))
        async with open_broker(url) as broker:
            assert isinstance(broker, BatchPublisher)
            tick, relay = await DispatchService(
                engine,
                broker,
                DispatchOptions(relay_batch=1000, publish_concurrency=500),
            ).run_once()
        assert tick.inserted == relay.published == 1200 and relay.failed == 0
        deliveries = await drain(url)
        async with engine.connect() as conn:
            stored = {r.key: r.body for r in (await conn.execute(select(DispatchOutbox.__table__))).all()}
        assert keys_of(deliveries) == {key: 1 for key in stored}
        for delivery in deliveries:
            assert delivery.body.decode() == stored[delivery.key]
            assert decode_job(delivery.body).idempotency_key == delivery.key
            assert {k: delivery.headers.get(k) for k in JOB_HEADERS} == dict(JOB_HEADERS)
    finally:
        await remove(url, "redis", name)
