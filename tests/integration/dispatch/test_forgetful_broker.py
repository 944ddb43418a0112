"""A broker that forgets what it confirmed: a private ``redis-server`` with no persistence at all
(``--save "" --appendonly no``, as many caches run) is the broker; the dispatch service publishes the
due jobs, the broker confirms them, then it is killed and started again -- empty. The outbox says
``published`` and no worker would ever see those jobs. The service notices (published long enough ago,
never started, the broker holds nothing), publishes them again, and each job runs exactly once."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import func, select

from crawlherd.brokers import open_broker
from crawlherd.db import DispatchOutbox, JobRun, create_engine, upgrade
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService
from crawlherd.fetch.base import FetchLimits
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.private_redis import PrivateRedis
from tests.support.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.redis]

KEYWORDS = ["a", "b", "c"]


async def count(engine: object, model: type, **where: str) -> int:
    async with engine.connect() as conn:  # type: ignore[attr-defined]
        query = select(func.count()).select_from(model)
        for column, value in where.items():
            query = query.where(getattr(model, column) == value)
        return int((await conn.execute(query)).scalar_one())


@pytest.mark.timeout(120)
async def test_jobs_a_restarted_broker_forgot_are_published_again_and_run_once(
    tmp_path: Path, board: Board, caplog: pytest.LogCaptureFixture  # noqa: F811
) -> None:
    caplog.set_level(logging.WARNING, logger="crawlherd.dispatch")
    engine = create_engine(f"sqlite:///{tmp_path}/config.db")
    await upgrade(engine)
    await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
    (tmp_path / "redis").mkdir()
    redis = PrivateRedis(tmp_path / "redis", persistent=False)
    await asyncio.to_thread(redis.start)
    url = f"{redis.url}?prefix=b&claim_idle=5"
    stop = asyncio.Event()
    try:
        async with open_broker(url) as dispatch_broker, open_broker(url) as worker_broker:
            options = DispatchOptions(republish_after=2.0, heartbeat_interval=None)
            dispatcher = DispatchService(engine, dispatch_broker, options)
            service = asyncio.create_task(dispatcher.run(interval=0.1, stop=stop))

            async def all_published() -> bool:
                return await count(engine, DispatchOutbox, status="published") == len(KEYWORDS)

            await wait_until(all_published, deadline=30)
            assert await dispatch_broker.pending() == len(KEYWORDS)
            await asyncio.to_thread(redis.kill)
            await asyncio.to_thread(redis.start)  # same port, nothing kept: the three jobs are gone
            assert await dispatch_broker.pending() == 0

            worker = Worker(engine, worker_broker, WorkerOptions(limits=FetchLimits(allow_private_addresses=True)))
            async with worker:
                running = asyncio.create_task(worker.run(stop))

                async def all_succeeded() -> bool:
                    return await count(engine, JobRun, status="succeeded") == len(KEYWORDS)

                await wait_until(all_succeeded, deadline=60)
                await asyncio.sleep(1.0)  # a second copy, were one published, has time to arrive
                stop.set()
                await running
            await service
        assert await count(engine, JobRun) == len(KEYWORDS)  # one run per job: none twice
    finally:
        stop.set()
        await asyncio.to_thread(redis.kill)
        await engine.dispose()
    assert sorted(p.split("q=")[1] for p in board.fetched("/search")) == KEYWORDS  # each fetched once
    said = [r.getMessage() for r in caplog.records if r.name == "crawlherd.dispatch.unstarted"]
    assert len(said) == 1 and said[0].startswith("3 job(s) published more than 2 s ago never started"), said
