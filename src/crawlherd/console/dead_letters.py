"""Dead letters: dead job runs, their message and reason; retry (back through the outbox) or discard.

A retry sets the run back to ``queued`` and its outbox row back to ``pending``, in one transaction: the
relay publishes the original message (attempt 0) again under its key, and the worker, seeing the run
is not finished, runs it. Nothing here needs the broker: the console stays a config-DB application.

The new round's attempts are numbered from 1 again by the worker (the message is the original one), so
a retry first moves the run's earlier attempts out of their way (:func:`~crawlherd.worker.runs.keep_attempts`): every
attempt, and its error, stays in ``job_attempts`` and on the job's page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import exists, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.console.audit import record
from crawlherd.db.engine import db_now
from crawlherd.db.models import DiscardedRun, DispatchOutbox, JobRun, ScrapeTarget, Website
from crawlherd.errors import CrawlherdError
from crawlherd.worker.runs import keep_attempts

__all__ = ["DeadLetter", "discard", "list_dead_letters", "retry_dead"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead job: its run, website, reason, and the job message (secrets in URLs redacted)."""

    run_id: int
    target_id: int
    website: str
    keywords: str
    slot_at: datetime
    attempts: int
    died_at: datetime | None
    reason: str | None
    message: str


def _not_discarded() -> object:
    return ~exists().where(DiscardedRun.run_id == JobRun.id)


async def list_dead_letters(engine: AsyncEngine, *, limit: int = 100, website: str | None = None) -> list[DeadLetter]:
    """Dead runs not discarded, oldest first."""
    R, T, W, ob = JobRun, ScrapeTarget, Website, DispatchOutbox  # noqa: N806
    stmt = (
        select(R.id, R.target_id, W.name, T.keywords, R.slot_at, R.attempts, R.finished_at, R.error, ob.body)
        .join(T, T.id == R.target_id)
        .join(W, W.id == T.website_id)
        .outerjoin(ob, (ob.target_id == R.target_id) & (ob.slot_at == R.slot_at))
        .where(R.status == "dead", _not_discarded())  # type: ignore[arg-type]
        .order_by(R.id)
        .limit(limit)
    )
    if website:
        stmt = stmt.where(W.name == website)
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return [
        DeadLetter(*r[:7], reason=redact_url(r[7]) if r[7] else None, message=redact_url(r[8] or "")) for r in rows
    ]


async def retry_dead(engine: AsyncEngine, run_ids: list[int] | None, *, actor: str) -> int:
    """Send dead runs again (``None``: every dead letter) through the outbox; how many were sent."""
    R, ob = JobRun, DispatchOutbox  # noqa: N806
    async with engine.begin() as conn:
        now = await db_now(conn)
        stmt = select(R.id, R.target_id, R.slot_at).where(R.status == "dead", _not_discarded())  # type: ignore[arg-type]
        if run_ids is not None:
            stmt = stmt.where(R.id.in_(run_ids))
        rows = (await conn.execute(stmt)).all()
        sent = 0
        for run_id, target_id, slot_at in rows:
            done = await conn.execute(
                update(ob)
                .where(ob.target_id == target_id, ob.slot_at == slot_at)
                .values(status="pending", leased_until=now, lease_owner=None, attempts=0, last_error=None,
                        published_at=None)
            )
            if not done.rowcount:
                continue  # no outbox row (a message from elsewhere): cannot be sent from here
            await keep_attempts(conn, target_id, slot_at)
            await conn.execute(update(R).where(R.id == run_id).values(status="queued", error=None, updated_at=now))
            sent += 1
        if sent:
            await record(
                conn, actor=actor, action="deadletter.retry", subject="runs",
                detail={"runs": [r[0] for r in rows][:1000], "sent": sent},
            )
    return sent


async def discard(engine: AsyncEngine, run_id: int, *, reason: str, actor: str) -> None:
    """Discard dead run ``run_id`` with ``reason`` (kept, and in the audit trail)."""
    reason = reason.strip()
    if not reason:
        raise CrawlherdError("give a reason to discard a dead letter")
    async with engine.begin() as conn:
        now = await db_now(conn)
        dead = (await conn.execute(select(JobRun.id).where(JobRun.id == run_id, JobRun.status == "dead"))).first()
        if dead is None:
            raise CrawlherdError(f"run {run_id} is not a dead job")
        await conn.execute(
            insert(DiscardedRun).values(run_id=run_id, discarded_by=actor[:100], discarded_at=now, reason=reason[:2000])
        )
        await record(conn, actor=actor, action="deadletter.discard", subject=f"run:{run_id}", detail={"reason": reason})
