"""Deliveries given back at shutdown are picked up by another worker promptly, on every broker.

A ``crawlherd worker`` process (A) holds every job (their listing pages hang at the server); a second
worker (B) waits with nothing to do. A is stopped with SIGTERM (and a second SIGTERM: abort, not wait
for the jobs): it must give its deliveries back to the broker as it goes. The brokers' own reclaim
(SQLite ``visibility_timeout``, Redis ``claim_idle``) is set to 300 s and RabbitMQ's
``consumer_timeout`` is 30 min, far beyond the test's time limit: only the give-back can explain B
running the jobs. B must then run every job, once, to success.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.db import JobRun
from crawlherd.db.models import ProcessHeartbeat
from crawlherd.dispatch.dispatch_service import DispatchService
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.dispatch import dispatch_due, relay_all
from tests.support.processes import CliProcess, job_statuses, wait_until
from tests.support.real_brokers import remove

pytestmark = pytest.mark.slow

KEYWORDS = ["a", "b"]
RECLAIM = 300  # seconds: the brokers' own reclaim, never reached within the time limit


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis),
                        pytest.param("amqp", marks=pytest.mark.rabbitmq)])
def held_broker_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> tuple[str, str]:
    """(kind, URL) of a scratch queue whose reclaim timeout is RECLAIM seconds."""
    kind = request.param
    if kind == "sqlite":
        return kind, f"sqlite:///{tmp_path / 'broker.db'}?queue=jobs&visibility_timeout={RECLAIM}"
    if kind == "redis":
        return kind, f"{request.getfixturevalue('redis_url')}?prefix={unique_name}&claim_idle={RECLAIM}"
    return kind, f"{request.getfixturevalue('amqp_url')}?queue={unique_name}"


@pytest.mark.timeout(240)  # ~60 s alone; headroom for a loaded CI machine
async def test_deliveries_given_back_at_shutdown_go_to_another_worker(
    engine: AsyncEngine, board: Board, tmp_path: Path, held_broker_url: tuple[str, str], unique_name: str,  # noqa: F811
) -> None:
    kind, broker_url = held_broker_url
    board.slow = 3600.0  # A's listing pages hang: A holds its jobs until it is stopped
    await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
    try:
        async with open_broker(broker_url) as broker:
            service = DispatchService(engine, broker)
            await dispatch_due(service)
            assert (await relay_all(service)).published == len(KEYWORDS)

        def worker(name: str) -> CliProcess:
            return CliProcess(["worker", "--database-url", str(engine.url), "--broker-url", broker_url,
                               "--frontier-url", "memory://", "--allow-private", "--concurrency", "2"],
                              tmp_path / f"{name}.log")

        a = await worker("a").start()

        async def a_holds_every_job() -> bool:
            return board.in_flight == len(KEYWORDS)  # both listing pages at the server, hanging

        await wait_until(a_holds_every_job, alive=[a])
        b = await worker("b").start()
        await wait_until(lambda: _logged(b, "job(s) at once"), alive=[b])  # B is up, with nothing to do
        board.slow = 0.0
        assert a.proc is not None
        a.proc.terminate()  # SIGTERM: stop taking jobs, wait for those in flight ...

        async def a_said_goodbye() -> bool:  # its last heartbeat written (an abort during it is not this test)
            async with engine.connect() as conn:
                return bool((await conn.execute(select(ProcessHeartbeat.stopped_at).where(
                    ProcessHeartbeat.kind == "worker", ProcessHeartbeat.pid == a_pid))).scalar_one_or_none())

        a_pid = a.proc.pid
        await wait_until(a_said_goodbye, alive=[a])
        a.proc.terminate()  # ... a second one: abort them, give them back
        await asyncio.wait_for(a.proc.wait(), 60)

        async def done_by_b() -> bool:
            return await job_statuses(engine) == ["succeeded"] * len(KEYWORDS)

        await wait_until(done_by_b, alive=[b])  # the deadline is far below RECLAIM
        assert await b.stop() == 0, b.log
        b.assert_clean()
        for bad in ("Traceback", "could not give back"):
            assert bad not in a.log, a.log
        async with engine.connect() as conn:
            workers = (await conn.execute(select(JobRun.worker))).scalars().all()
        b_name = b.log.split("worker ", 1)[1].split(":", 1)[0]
        assert [w for w in workers if w and b_name in w] == list(workers), (workers, b_name)
        assert sorted(p.split("q=")[1] for p in board.fetched("/search")) == sorted(KEYWORDS * 2)  # A's, then B's
    finally:
        await remove(broker_url, kind, unique_name)


async def _logged(proc: CliProcess, text: str) -> bool:
    return text in proc.log
