""""Run now": one ad-hoc slot of a target, through the outbox like every scheduled slot.

:func:`run_now` writes, in one transaction, an outbox row for the slot ``now`` (database clock) and a
``manual_runs`` row. It is idempotent twice over: the same ``request_key`` (a double click, a form
sent again) returns the first request's slot; and while an earlier ad-hoc run of the target is not
settled (published, then succeeded or dead), a new request returns that one instead of queuing
another. The target's own schedule is untouched.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.console.audit import record
from crawlherd.db.engine import db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import JobRun, ManualRun
from crawlherd.dispatch.outbox import lock_target, outbox_row, write_outbox
from crawlherd.errors import CrawlherdError

__all__ = ["ManualRunResult", "run_now"]


@dataclass(frozen=True, slots=True)
class ManualRunResult:
    """The ad-hoc slot of a "Run now": the target and the ``slot_at`` its job runs for; ``created`` is
    False when an earlier request's slot was returned (the same request sent twice runs once)."""

    target_id: int
    slot_at: datetime
    created: bool


async def run_now(
    engine: AsyncEngine, target_id: int, *, requested_by: str, request_key: str | None = None
) -> ManualRunResult:
    """Queue one ad-hoc run of ``target_id`` (see the module docstring)."""
    key = (request_key or uuid.uuid4().hex)[:100]
    with translate_db_errors("queuing a run now"):
        async with engine.begin() as conn:
            now = await db_now(conn)
            same = (
                await conn.execute(select(ManualRun.target_id, ManualRun.slot_at).where(ManualRun.request_key == key))
            ).first()
            if same is not None:
                if same.target_id != target_id:
                    raise CrawlherdError("this run-now request was made for another target")
                return ManualRunResult(target_id, same.slot_at, False)
            # Lock the target (PostgreSQL; SQLite's BEGIN IMMEDIATE serialises anyway): two requests
            # of the same target cannot both find no outstanding run.
            row = await lock_target(conn, target_id)
            if row is None:
                raise CrawlherdError(f"no scrape target with id {target_id} (see `crawlherd targets list`)")
            outstanding = (
                await conn.execute(
                    select(ManualRun.slot_at)
                    .outerjoin(
                        JobRun, (JobRun.target_id == ManualRun.target_id) & (JobRun.slot_at == ManualRun.slot_at)
                    )
                    .where(
                        ManualRun.target_id == target_id,
                        (JobRun.id.is_(None)) | JobRun.status.notin_(("succeeded", "dead")),
                    )
                    .order_by(ManualRun.slot_at.desc())
                    .limit(1)
                )
            ).first()
            if outstanding is not None:
                return ManualRunResult(target_id, outstanding.slot_at, False)
            if row.site is None:
                raise CrawlherdError(f"target {target_id} cannot run: its website's {row.site_error}")
            await write_outbox(conn, [outbox_row(row, now, now)], now=now, claimed_by=f"run-now:{requested_by}")
            await conn.execute(
                insert(ManualRun).values(
                    target_id=target_id, slot_at=now, request_key=key, requested_by=requested_by[:100], requested_at=now
                )
            )
            await record(
                conn,
                actor=requested_by,
                action="target.run_now",
                subject=f"target:{target_id}",
                detail={"slot_at": now.isoformat()},
            )
    return ManualRunResult(target_id, now, True)
