"""Jobs a broker forgot: published, confirmed, and never started.

A broker that keeps messages only in memory (Redis without persistence, a RabbitMQ queue that is not
durable, a broker restored from an old backup) can lose what it confirmed: the outbox says
``published`` and no worker ever sees the job. Nothing downstream would notice, so the dispatch
service looks for it (:func:`republish_unstarted`, every ``republish_after / 4`` seconds, at most every
minute): outbox rows published more than ``republish_after`` ago whose (target, slot) has no row in
``job_runs`` -- a worker writes that row the moment it takes a job --, **while the broker holds no
message waiting** (a backlog explains a job not started yet; an empty queue does not). Those rows go
back to ``pending`` and the relay publishes them again, same key and job id; if the first copy turns
up after all, the worker's run key drops the second.

Only rows published within the last :data:`LOOKBACK` are considered: ``job_runs`` rows are pruned
after a day at the earliest (``crawlherd db prune``), and an older slot without a run row may be one
whose run was pruned, not one that never ran.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import and_, exists, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers.base import Broker
from crawlherd.db.engine import db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import DispatchOutbox, JobRun

__all__ = ["LOOKBACK", "check_interval", "republish_unstarted"]

log = logging.getLogger(__name__)

#: How far back published rows are checked (half the shortest ``job_runs`` retention).
LOOKBACK = timedelta(hours=12)


def check_interval(republish_after: float) -> float:
    """Seconds between two checks: a quarter of ``republish_after``, between 1 s and a minute."""
    return min(60.0, max(1.0, republish_after / 4))


async def republish_unstarted(engine: AsyncEngine, broker: Broker, *, after: timedelta) -> int:
    """Put back to ``pending`` the outbox rows published more than ``after`` ago whose job never
    started, when ``broker`` holds no message waiting; how many (each said in a warning)."""
    if await broker.pending() > 0:
        return 0
    ob = DispatchOutbox
    started = exists().where(and_(JobRun.target_id == ob.target_id, JobRun.slot_at == ob.slot_at))
    with translate_db_errors("looking for published jobs that never started"):
        async with engine.begin() as conn:
            now = await db_now(conn)
            lost = (
                await conn.execute(
                    select(ob.id, ob.key).where(
                        ob.status == "published",
                        ob.published_at < now - after,
                        ob.published_at > now - LOOKBACK,
                        ~started,
                    )
                )
            ).all()
            if not lost:
                return 0
            await conn.execute(
                update(ob)
                .where(ob.id.in_([row.id for row in lost]), ob.status == "published")
                .values(
                    status="pending",
                    leased_until=now,  # the relay takes pending rows whose leased_until has passed
                    lease_owner=None,
                    last_error=f"published, never started after {after.total_seconds():g} s and the broker holds "
                    "nothing: published again",
                )
            )
    log.warning(
        "%d job(s) published more than %g s ago never started and the broker holds no message: publishing them "
        "again (a broker that lost what it confirmed -- one without persistence that restarted?). First: %s",
        len(lost), after.total_seconds(), lost[0].key,
    )
    return len(lost)
