"""``crawlherd worker`` through a config-DB outage: its heartbeat says it once; a config DB that hangs
(a TCP proxy that stops forwarding) is bounded by the connect and statement timeouts.

A PRIVATE PostgreSQL cluster (``pg_ctl`` on its own data directory and port, killed by its
postmaster's PID and started again) is the worker's config DB; the broker is the shared Redis (a
queue of the test's own). The worker beats every second (``heartbeat_interval``, shortened from its
10 s for the test); the outage lasts about three beats. Its log
must hold exactly one "config DB unavailable" warning and one "config DB is back after" line -- not a
warning per failed beat -- and no traceback; after the outage, the beats land again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from sqlalchemy import select

from crawlherd.db import create_engine, upgrade
from crawlherd.db.models import ProcessHeartbeat, StoredItem
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.private_postgres import PrivatePostgres
from tests.support.processes import CliProcess, outage_lines, wait_until
from tests.support.real_brokers import remove

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

BEAT = 1.0  # seconds between the worker's heartbeats


@pytest.mark.timeout(150)
async def test_worker_heartbeat_says_a_config_db_outage_once(
    tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    pg = PrivatePostgres()
    await asyncio.to_thread(pg.start)
    engine = create_engine(pg.url)
    broker_url = f"{redis_url}?prefix={unique_name}"
    worker = CliProcess(["worker", "--database-url", pg.url, "--broker-url", broker_url, "--frontier-url", "memory://"],
                        tmp_path / "worker.log", env={"CRAWLHERD_HEARTBEAT_INTERVAL": str(BEAT)})

    async def beats() -> list[tuple[object, object]]:
        async with engine.connect() as conn:
            return [tuple(r) for r in (await conn.execute(
                select(ProcessHeartbeat.last_seen, ProcessHeartbeat.stopped_at))).all()]

    try:
        await upgrade(engine)
        await worker.start()

        async def registered() -> bool:
            return len(await beats()) == 1

        await wait_until(registered, alive=[worker])
        ((seen_before, _),) = await beats()
        await engine.dispose()
        await asyncio.to_thread(pg.kill)
        await asyncio.sleep(3.5 * BEAT)  # about three beats fail meanwhile
        await asyncio.to_thread(pg.start)

        async def beat_again() -> bool:
            return (await beats())[0][0] != seen_before

        await wait_until(beat_again, alive=[worker])  # the beats land again
        await worker.stop()
        worker.assert_clean()
        log = worker.log
        lost, back = outage_lines(log, "config DB")
        assert len(lost) == 1 and len(back) == 1, (lost, back, log)
        assert not [line for line in log.splitlines() if " WARNING " in line and "heartbeat" in line], log
        ((_, stopped),) = await beats()
        assert stopped is not None  # said goodbye at SIGTERM
    finally:
        if worker.proc is not None:
            await worker.stop()
        await engine.dispose()
        await asyncio.to_thread(pg.stop)
        await remove(broker_url, "redis", unique_name)


async def _logged(proc: CliProcess, text: str) -> bool:
    return text in proc.log


@pytest.mark.timeout(30)
async def test_a_beat_lands_when_its_details_fail(tmp_path: Path) -> None:
    """The worker's details (its frontier's counts) failing -- the frontier down -- is not the config
    DB down: the beat lands without them, and no outage is said."""
    from crawlherd._resilience import OutageLog
    from crawlherd.db.heartbeat import Heartbeat
    from crawlherd.errors import BackendUnavailableError

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'config.db'}")

    async def details() -> dict[str, object]:
        raise BackendUnavailableError("frontier down")

    outages = OutageLog(logging.getLogger("test"), "test")
    try:
        await upgrade(engine)
        beat = Heartbeat(engine, kind="worker", details=details, outages=outages, info={"a": 1})
        await beat.register()
        await beat.beat(stopped=True)
        async with engine.connect() as conn:
            ((stopped, info),) = (await conn.execute(select(ProcessHeartbeat.stopped_at, ProcessHeartbeat.info))).all()
        assert stopped is not None and info == {"a": 1}
        assert "config DB" not in outages.down_now
    finally:
        await engine.dispose()


@pytest.mark.timeout(120)
async def test_a_config_db_that_hangs_under_a_working_worker(
    tmp_path: Path, redis_url: str, unique_name: str, board: Board  # noqa: F811
) -> None:
    """The config DB (a private PostgreSQL cluster behind a test-owned TCP proxy) stops answering --
    connections stay open, nothing comes back -- while a worker runs jobs: its statements and connects
    fail after the URL's ``command_timeout`` / ``connect_timeout`` instead of waiting forever; the
    worker says the outage once, and once the proxy forwards again every job succeeds once and every
    item is stored once with its detail page."""
    from crawlherd.brokers import open_broker
    from crawlherd.db import JobRun
    from crawlherd.dispatch.dispatch_service import DispatchService
    from tests._netutil import TcpProxy

    board.slow = 0.3
    keywords = [f"h{n}" for n in range(6)]
    pg = PrivatePostgres()
    await asyncio.to_thread(pg.start)
    engine = create_engine(pg.url)  # the test's own way in, not through the proxy
    broker_url = f"{redis_url}?prefix={unique_name}"
    async with TcpProxy("127.0.0.1", pg.port) as proxy:
        proxied = pg.url.replace(f":{pg.port}/", f":{proxy.port}/") + "?connect_timeout=1&command_timeout=2"
        worker = CliProcess(
            ["worker", "--database-url", proxied, "--broker-url", broker_url, "--frontier-url", "memory://",
             "--allow-private", "--concurrency", "2", "--backoff", "0.2"],
            tmp_path / "worker.log", env={"CRAWLHERD_HEARTBEAT_INTERVAL": str(BEAT)})

        async def statuses() -> list[str]:
            async with engine.connect() as conn:
                return list((await conn.execute(select(JobRun.status))).scalars())

        try:
            await upgrade(engine)
            await load(engine, tmp_path, website(board, robots="ignore"), keywords, due=True)
            async with open_broker(broker_url) as broker:
                await DispatchService(engine, broker).run_once()
            await worker.start()

            async def running() -> bool:
                return "running" in await statuses()

            await wait_until(running, alive=[worker])
            proxy.hang()  # every byte held, both ways; new connections accepted and held too
            await wait_until(lambda: _logged(worker, ": config DB unavailable ("), alive=[worker], deadline=20)
            await asyncio.sleep(2.0)  # a few more timeouts meanwhile: said once
            proxy.resume()

            async def all_succeeded() -> bool:
                return sorted(await statuses()) == ["succeeded"] * len(keywords)

            await wait_until(all_succeeded, alive=[worker], deadline=40)
            await worker.stop()
            async with engine.connect() as conn:
                stored = [d if isinstance(d, dict) else json.loads(d)
                          for d in (await conn.execute(select(StoredItem.data))).scalars()]
        finally:
            if worker.proc is not None:
                await worker.stop()
            await engine.dispose()
            await asyncio.to_thread(pg.stop)
            await remove(broker_url, "redis", unique_name)
    worker.assert_clean()
    lost, back = outage_lines(worker.log, "config DB")
    assert len(lost) == 1 and len(back) == 1, (lost, back, worker.log)
    assert sorted(f.get("salary", "-") for f in stored) == sorted(
        f"salary of {k}-{n}" for k in keywords for n in range(3))

