"""A failure no retry can cure here does not spend the job's attempts (issue 23).

A worker without ``allow_private_addresses`` gets jobs of a website on 127.0.0.1: its own settings
refuse the site, so every attempt would fail alike. It must give each job back to the queue without
recording an attempt (none ``failed``, none ``dead``, nothing dead-lettered), take it again later and
give it back again, say so once (one error line for the website), and leave the job intact for a
worker that may crawl it -- which then runs it to success at its first attempt.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.db.models import JobAttempt
from crawlherd.dispatch.dispatch_service import DispatchService
from crawlherd.fetch.base import FetchLimits
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.integration.test_worker import Board, board, load, runs, website  # noqa: F401 - the board fixture
from tests.support.dispatch import dispatch_due, relay_all
from tests.support.processes import wait_until

KEYWORDS = ["a", "b"]


async def test_a_worker_that_refuses_the_site_gives_the_jobs_back_without_spending_attempts(
    engine: AsyncEngine, board: Board, tmp_path: Path, caplog: pytest.LogCaptureFixture,  # noqa: F811
) -> None:
    await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
    db_url = str(engine.url)
    async with open_broker(db_url) as broker:
        service = DispatchService(engine, broker)
        await dispatch_due(service)
        assert (await relay_all(service)).published == len(KEYWORDS)

        def worker(name: str, *, allow_private: bool) -> Worker:
            limits = FetchLimits(allow_private_addresses=allow_private)
            return Worker(engine, broker, WorkerOptions(name=name, limits=limits, backoff=0.05, max_backoff=0.05,
                                                        max_attempts=3, heartbeat_interval=0.2))

        refusing = worker("refusing", allow_private=False)
        stop = asyncio.Event()
        with caplog.at_level(logging.INFO, logger="crawlherd.worker"):
            await refusing.__aenter__()
            running = asyncio.create_task(refusing.run(stop))

            async def every_job_given_back_more_times_than_it_has_attempts() -> bool:
                return refusing.stats.refused > 3 * len(KEYWORDS)

            try:
                await wait_until(every_job_given_back_more_times_than_it_has_attempts)
            finally:
                stop.set()
                await running
                await refusing.close()
        assert board.paths == []  # nothing fetched
        assert refusing.stats.dead == refusing.stats.retried == 0
        assert await broker.dead_letters() == []
        assert {status for status, _attempts, _error in await runs(engine)} <= {"queued"}
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(JobAttempt))).scalar_one() == 0
        said = [r for r in caplog.records if r.levelno >= logging.ERROR and "refuse website" in r.getMessage()]
        assert len(said) == 1 and "--allow-private" in said[0].getMessage()  # once, loudly, with the fix

        able = worker("able", allow_private=True)
        stop = asyncio.Event()
        await able.__aenter__()
        running = asyncio.create_task(able.run(stop))

        async def every_job_succeeded() -> bool:
            return [s for s, _a, _e in await runs(engine)] == ["succeeded"] * len(KEYWORDS)

        try:
            await wait_until(every_job_succeeded)
        finally:
            stop.set()
            await running
            await able.close()
        assert [attempts for _s, attempts, _e in await runs(engine)] == [1] * len(KEYWORDS)
