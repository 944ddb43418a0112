"""The embedded runner: the dispatch service (tick + relay) and a worker side by side in one process,
on one
config DB and one broker. ``crawlherd run`` and ``crawlherd demo`` are built on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers.base import Broker
from crawlherd.db.engine import db_now
from crawlherd.db.errors import is_db_unavailable
from crawlherd.db.models import DispatchOutbox, JobRun, ScrapeTarget
from crawlherd.dispatch.dispatch_service import DispatchService, ProgressFn
from crawlherd.worker.worker import Worker

__all__ = ["RunProgress", "progress_of", "run_embedded"]


@dataclass(frozen=True, slots=True)
class RunProgress:
    """Where the run stands: ``jobs`` written to the outbox, ``published`` of them, targets ``due`` now,
    and the runs by status: ``succeeded``, ``failed`` (waiting for a retry), ``dead``, ``running``."""

    jobs: int
    published: int
    due: int
    succeeded: int
    failed: int
    dead: int
    running: int

    @property
    def settled(self) -> int:
        return self.succeeded + self.dead

    @property
    def all_settled(self) -> bool:
        """Every job dispatched so far is published and has succeeded or is dead."""
        return self.published == self.jobs and self.settled >= self.jobs

    @property
    def idle(self) -> bool:
        """No target is due and every job dispatched so far has succeeded or is dead."""
        return self.due == 0 and self.all_settled


async def progress_of(engine: AsyncEngine) -> RunProgress:
    """Read the run's progress from the config DB."""
    async with engine.connect() as conn:
        outbox = (
            await conn.execute(
                select(func.count(), func.count(DispatchOutbox.published_at)).select_from(DispatchOutbox)
            )
        ).one()
        due = (
            await conn.execute(
                select(func.count())
                .select_from(ScrapeTarget)
                .where(ScrapeTarget.active, ScrapeTarget.next_run_at <= await db_now(conn))
            )
        ).scalar_one()
        runs = dict((await conn.execute(select(JobRun.status, func.count()).group_by(JobRun.status))).all())
    return RunProgress(
        jobs=outbox[0],
        published=outbox[1],
        due=due,
        succeeded=runs.get("succeeded", 0),
        failed=runs.get("failed", 0),
        dead=runs.get("dead", 0),
        running=runs.get("running", 0),
    )


async def run_embedded(
    engine: AsyncEngine,
    broker: Broker,
    worker: Worker,
    *,
    stop: asyncio.Event,
    interval: float = 1.0,
    until_idle: bool = False,
    on_progress: Callable[[RunProgress], None] | None = None,
    progress_every: float = 0.5,
    on_cycle: ProgressFn | None = None,
) -> RunProgress:
    """Run dispatcher and worker until ``stop`` is set -- or, with ``until_idle``, until every job
    dispatched so far is settled (succeeded or dead) and the worker's detail pages are fetched.
    ``on_progress`` sees the config DB's progress (every run's, not only this one's); ``on_cycle``
    each dispatch tick and relay round of this run that did something."""
    service = DispatchService(engine, broker, outages=worker.outages)  # one process: an outage said once
    async with asyncio.TaskGroup() as tg:
        tg.create_task(service.run(interval=interval, stop=stop, on_cycle=on_cycle), name="embedded-dispatch")
        tg.create_task(worker.run(stop), name="embedded-worker")
        progress = await progress_of(engine)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(progress_every):
                    await stop.wait()
            try:
                progress = await progress_of(engine)
            except Exception as exc:  # the config DB is down: the dispatcher and the worker say so
                if not is_db_unavailable(exc):
                    raise
                continue
            if on_progress is not None:
                on_progress(progress)
            # Idle also means nothing waiting on the broker (a message published there directly, or a
            # retry coming due): the worker may not have taken it yet.
            if until_idle and progress.idle and await worker.idle() and not await broker.pending():
                stop.set()
    return await progress_of(engine)
