"""A hung broker loses no scheduled run (issue 11, point 1).

RabbitMQ stops answering without closing the connection -- a test-owned TCP proxy in front of the
machine's RabbitMQ holds every byte both ways for 75 seconds -- while targets fall due every 5 seconds
with a misfire grace of 2 seconds. The tick goes on claiming slots on the database clock whatever the
broker does; the relay's rounds give up at their deadline and retry; when the broker answers again every
slot is published. The test checks the config DB (every slot of the run, no gap, each once) and the
queue (every slot delivered; duplicates allowed -- a publish cut off by the hang may have been kept --
and dropped by the workers' run key).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from crawlherd.brokers import open_broker
from crawlherd.db import DispatchOutbox, create_engine
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService
from tests._netutil import TcpProxy
from tests.support.db import add_targets, add_website, database_now
from tests.support.real_brokers import drain, remove

EVERY = timedelta(seconds=5)
HANG = 75.0


@pytest.fixture
def pg_url(postgres_db_url: str) -> str:
    return postgres_db_url


@pytest.fixture
async def amqp_proxy(amqp_url: str) -> AsyncIterator[TcpProxy]:
    async with TcpProxy("127.0.0.1", 5672) as proxy:
        yield proxy


@pytest.mark.postgres
@pytest.mark.rabbitmq
@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_a_75_second_broker_hang_loses_no_slot(
    pg_url: str, amqp_url: str, amqp_proxy: TcpProxy, unique_name: str
) -> None:
    direct_url = f"{amqp_url}?queue={unique_name}"
    proxied_url = amqp_url.replace("127.0.0.1:5672", f"127.0.0.1:{amqp_proxy.port}") + f"?queue={unique_name}"
    engine = create_engine(pg_url)
    try:
        start = await database_now(engine)
        site = await add_website(engine)
        ids = await add_targets(
            engine, site, 10, every=EVERY, anchor=start + timedelta(seconds=1), grace=timedelta(seconds=2)
        )
        async with open_broker(proxied_url, connect_timeout=3.0, publish_timeout=5.0) as broker:
            service = DispatchService(
                engine,
                broker,
                DispatchOptions(lease=20.0, publish_timeout=5.0, backoff=1.0, max_backoff=5.0),
            )
            stop = asyncio.Event()
            runner = asyncio.create_task(service.run(interval=0.5, stop=stop))
            try:
                await asyncio.sleep(6)  # a slot or two published before the hang
                amqp_proxy.hang()
                hang_start = await database_now(engine)
                await asyncio.sleep(HANG)
                hang_end = await database_now(engine)
                amqp_proxy.resume()
                claimed_in_hang = await _rows(engine, created_between=(hang_start, hang_end))
                for _ in range(240):  # until every row is published (bounded; not a timing assertion)
                    rows = await _rows(engine)
                    if rows and all(r.status == "published" for r in rows) and rows[-1].slot_at > hang_end:
                        break
                    await asyncio.sleep(0.5)
            finally:
                stop.set()
                await asyncio.wait_for(runner, 60)
            await service.run_once()  # what fell due while stopping
        rows = await _rows(engine)
    finally:
        await engine.dispose()
    try:
        deliveries = await drain(direct_url, idle=5.0)
    finally:
        await remove(direct_url, "amqp", unique_name)

    # The tick went on during the hang: slots that fell due then were claimed then.
    assert len({r.target_id for r in claimed_in_hang}) == 10
    assert len(claimed_in_hang) >= 10 * int(HANG // EVERY.total_seconds()) - 10
    # Every slot of every target, from the first to the last, once, and all published.
    assert all(r.status == "published" for r in rows), [r for r in rows if r.status != "published"][:3]
    for target in ids:
        slots = sorted(r.slot_at for r in rows if r.target_id == target)
        assert slots[0] - start <= 2 * EVERY and slots[-1] > hang_end
        assert all(b - a == EVERY for a, b in zip(slots, slots[1:], strict=False)), f"gap in target {target}"
    # Every slot reached the queue (at least once).
    assert {d.key for d in deliveries} == {r.key for r in rows}


async def _rows(engine, *, created_between=None):  # type: ignore[no-untyped-def]
    query = select(DispatchOutbox.__table__).order_by(DispatchOutbox.slot_at, DispatchOutbox.target_id)
    if created_between is not None:
        low, high = created_between
        query = query.where(DispatchOutbox.created_at > low, DispatchOutbox.created_at < high)
    async with engine.connect() as conn:
        return (await conn.execute(query)).all()
