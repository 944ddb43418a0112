"""Must-show 2: the broker stops in the middle of dispatching. Jobs wait in the outbox (kept, with
backoff); when the broker returns every one is delivered; none lost.

Against the broker double (always) and against a PRIVATE redis-server of this test (killed by its PID
and started again on the same port and data directory; the shared Redis is never touched) once the
real Redis broker is integrated.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from crawlherd.brokers import open_broker
from crawlherd.db import DispatchOutbox, create_engine, upgrade
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService
from tests.support.db import add_targets, add_website, database_now
from tests.support.dispatch import dispatch_due, relay_all
from tests.support.private_redis import PrivateRedis, private_redis_server
from tests.support.real_brokers import drain

HOUR = timedelta(hours=1)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    yield from private_redis_server(tmp_path)


@pytest.mark.redis
async def test_redis_stopped_mid_dispatch_jobs_wait_then_all_are_delivered(
    private_redis: PrivateRedis, tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path}/config.db"
    await upgrade(db_url)
    engine = create_engine(db_url)
    broker_url = f"redis://127.0.0.1:{private_redis.port}/0?prefix=outage"
    try:
        now = await database_now(engine)
        site = await add_website(engine)
        await add_targets(engine, site, 300, every=HOUR, anchor=now - timedelta(seconds=10))
        async with open_broker(broker_url) as broker:
            dispatcher = DispatchService(
                engine,
                broker,
                DispatchOptions(relay_batch=100, backoff=0.0, publish_timeout=5.0),
            )
            assert (await dispatch_due(dispatcher)).inserted == 300
            assert (await dispatcher.relay()).published == 100

            private_redis.kill()  # the broker goes away with 200 jobs still to publish
            down = await dispatcher.relay()
            assert down.published == 0 and down.failed == 100
            async with engine.connect() as conn:
                rows = (await conn.execute(select(DispatchOutbox.__table__))).all()
            waiting = [r for r in rows if r.status == "pending"]
            assert len(waiting) == 200  # all kept in the outbox
            assert sum(1 for r in waiting if r.attempts == 1 and r.last_error) == 100

            private_redis.start()  # back, same port, same data
            for _ in range(50):
                result = await relay_all(dispatcher)
                async with engine.connect() as conn:
                    left = (
                        await conn.execute(select(DispatchOutbox.id).where(DispatchOutbox.status == "pending"))
                    ).all()
                if not left:
                    break
                async with engine.begin() as conn:  # the client may need a moment to reconnect
                    await conn.execute(update(DispatchOutbox).values(leased_until=now))
                await asyncio.sleep(0.1)
            assert not left, f"{len(left)} still pending after the broker came back ({result})"
        keys = Counter(d.key for d in await drain(broker_url, idle=2.0))
        assert set(keys) == {r.key for r in rows} and len(keys) == 300  # every one delivered
        assert max(keys.values()) == 1  # killed between batches: nothing in flight, so no duplicate
    finally:
        await engine.dispose()
