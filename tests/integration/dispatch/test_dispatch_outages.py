"""``crawlherd dispatch`` through a config-DB outage and a broker outage: each said once.

A PRIVATE PostgreSQL cluster (``pg_ctl`` on its own data directory and port, killed by its
postmaster's PID and started again) is the config DB; RabbitMQ is reached through a TCP proxy of the
test's own, which the test takes down (every connection reset, new ones refused) and brings back. The
dispatcher runs as a real process throughout. Its log must hold exactly one "unavailable" warning and
one "is back after" line per outage -- not a warning per retry -- and no traceback; every slot that
fell due, before, during and after the outages, is in the outbox, published, and in the queue.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import func, select, text

from crawlherd.db import DispatchOutbox, create_engine, upgrade
from tests._netutil import TcpProxy
from tests.support.db import add_targets, add_website, database_now
from tests.support.private_postgres import PrivatePostgres
from tests.support.processes import CliProcess, outage_lines, wait_until
from tests.support.real_brokers import drain, remove

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.rabbitmq]

TARGETS = 5
EVERY = timedelta(seconds=1)


@pytest.mark.timeout(240)
async def test_dispatch_says_each_outage_once_and_loses_nothing(
    tmp_path: Path, amqp_url: str, unique_name: str
) -> None:
    pg = PrivatePostgres()
    await asyncio.to_thread(pg.start)
    engine = create_engine(pg.url)
    upstream = urlsplit(amqp_url)
    proxy = TcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 5672)
    await proxy.up()
    direct = f"{amqp_url}?queue={unique_name}"
    proxied = f"amqp://{upstream.username}:{upstream.password}@127.0.0.1:{proxy.port}/?queue={unique_name}"
    dispatcher = CliProcess(["dispatch", "--interval", "0.2", "--database-url", pg.url, "--broker-url", proxied],
                            tmp_path / "dispatch.log")

    async def published() -> int:
        async with engine.connect() as conn:
            return int((await conn.execute(
                select(func.count()).where(DispatchOutbox.status == "published"))).scalar_one())

    try:
        await upgrade(engine)
        site = await add_website(engine)
        anchor = await database_now(engine) + timedelta(seconds=1)
        await add_targets(engine, site, TARGETS, every=EVERY, anchor=anchor, misfire="backfill",
                          backfill_limit=10_000, grace=timedelta(hours=1))
        await dispatcher.start()
        await wait_until(lambda: _at_least(published, 2 * TARGETS), alive=[dispatcher])

        # The config DB goes away for a few seconds (slots keep falling due meanwhile).
        await engine.dispose()
        await asyncio.to_thread(pg.kill)
        await asyncio.sleep(4)
        await asyncio.to_thread(pg.start)
        await wait_until(lambda: _logged(dispatcher, "config DB is back after"), alive=[dispatcher])
        before = await published()
        await wait_until(lambda: _at_least(published, before + 2 * TARGETS), alive=[dispatcher])

        # The broker goes away for a few seconds.
        await proxy.down()
        await asyncio.sleep(4)
        await proxy.up()
        await wait_until(lambda: _logged(dispatcher, "broker is back after"), alive=[dispatcher])

        # Everything due until now is published (bounded by the timeout).
        end = await database_now(engine)

        async def settled() -> bool:
            async with engine.connect() as conn:
                pending = (await conn.execute(select(func.count()).where(
                    DispatchOutbox.slot_at < end, DispatchOutbox.status != "published"))).scalar_one()
            return pending == 0

        await wait_until(settled, alive=[dispatcher])
        await dispatcher.stop()
        dispatcher.assert_clean()
        log = dispatcher.log
        for service in ("config DB", "broker"):
            lost, back = outage_lines(log, service)
            assert len(lost) == 1 and len(back) == 1, (service, lost, back, log)

        async with engine.connect() as conn:
            rows = (await conn.execute(text(
                "SELECT target_id, slot_at, key FROM dispatch_outbox WHERE slot_at < :end"), {"end": end})).all()
        slots = (end - anchor) // EVERY + 1  # slots anchor + k * EVERY before end
        per_target = Counter(r.target_id for r in rows)
        assert len(per_target) == TARGETS and set(per_target.values()) == {slots}, per_target  # none skipped
        delivered = Counter(d.key for d in await drain(direct, idle=2.0))
        assert {r.key for r in rows} <= set(delivered)  # every slot's job is in the queue: nothing lost
        # A publish cut off by the broker outage may be published again (at least once): the same key,
        # dropped by the workers' run key. Nothing else is ever published twice.
        twice = [k for k, n in delivered.items() if n > 1]
        assert len(twice) <= 4 * TARGETS, twice  # at most what two relay rounds had in flight at the cut
    finally:
        if dispatcher.proc is not None:
            await dispatcher.stop()
        await proxy.down()
        await engine.dispose()
        await asyncio.to_thread(pg.stop)
        await remove(direct, "amqp", unique_name)


async def _at_least(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() >= n


async def _logged(proc: CliProcess, text: str) -> bool:
    return text in proc.log
