"""The tick: due targets -> outbox rows, in one transaction on the **database clock**.

Steps (each a function below):

1. :func:`claim_due` -- lock up to ``batch_size`` due targets (``FOR UPDATE SKIP LOCKED`` on
   PostgreSQL; SQLite transactions are ``BEGIN IMMEDIATE``), oldest ``next_run_at`` first.
2. :func:`plan_target` -- the slots each one owes (its schedule, misfire policy and jitter) and the
   job message of every slot.
3. :func:`write_outbox` -- one outbox row per (target, slot), ``ON CONFLICT DO NOTHING``.
4. :func:`advance_targets` -- ``last_scheduled`` and ``next_run_at`` move on, anchored to the slot
   (no drift).

All four run in one transaction: a target is claimed by exactly one dispatcher at a time and its
slots move forward in the same commit as its outbox rows, so each (target, slot) is written once; the
unique key ``(target_id, slot_at)`` makes a second write impossible anyway. The tick never talks to
the broker: scheduling goes on whatever the broker does (the relay, :mod:`crawlherd.service.relay`,
publishes the rows).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Row, Select, Table, bindparam, func, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd import metrics
from crawlherd.db.engine import db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import DispatchOutbox, OutboxTrail, ScrapeTarget, UTCDateTime, Website
from crawlherd.errors import CrawlherdError
from crawlherd.messages import JobMessage, encode_job
from crawlherd.service.schedule import plan_slots, schedule_of
from crawlherd.service.search_url import render_search_url

__all__ = [
    "TickResult",
    "advance_targets",
    "claim_due",
    "outbox_row",
    "plan_target",
    "select_targets",
    "tick",
    "write_outbox",
]

log = logging.getLogger(__name__)

_OUTBOX = cast(Table, DispatchOutbox.__table__)
_TARGETS = cast(Table, ScrapeTarget.__table__)
_TRAIL = cast(Table, OutboxTrail.__table__)
#: How long a target that cannot be scheduled (edited by hand into an unusable state) waits.
BROKEN_TARGET_RETRY = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class TickResult:
    """One tick (or several, summed): targets claimed, slots planned, outbox rows actually inserted."""

    targets: int = 0
    slots: int = 0
    inserted: int = 0

    def __add__(self, other: TickResult) -> TickResult:
        return TickResult(self.targets + other.targets, self.slots + other.slots, self.inserted + other.inserted)


@dataclass(slots=True)
class TargetPlan:
    """What the tick does for one claimed target: its outbox rows and where its schedule moves."""

    target_id: int
    next_run_at: datetime
    last_scheduled: datetime | None = None
    outbox: list[dict[str, Any]] = field(default_factory=list)


async def tick(
    engine: AsyncEngine, *, batch_size: int, max_slots_per_target: int, owner: str | None = None
) -> TickResult:
    """Claim up to ``batch_size`` due targets and write their slots to the outbox, in one transaction;
    ``owner`` (the dispatcher's name) is recorded as the claimer of each row (``outbox_trail``).
    A database outage raises :class:`~crawlherd.errors.BackendUnavailableError`."""
    with translate_db_errors("during the tick"):
        async with engine.begin() as conn:
            now = await db_now(conn)
            rows = await claim_due(conn, now=now, limit=batch_size)
            if not rows:
                return TickResult()
            plans = [plan_target(row, now=now, max_slots=max_slots_per_target) for row in rows]
            inserted = await write_outbox(conn, [r for p in plans for r in p.outbox], claimed_by=owner)
            await advance_targets(conn, plans, now=now)
    metrics.OUTBOX_WRITTEN.inc(inserted)
    return TickResult(targets=len(rows), slots=sum(len(p.outbox) for p in plans), inserted=inserted)


async def claim_due(conn: AsyncConnection, *, now: datetime, limit: int) -> Sequence[Row[Any]]:
    """Lock and return up to ``limit`` active targets due at ``now`` (with their website's columns)."""
    T = ScrapeTarget
    query = (
        select_targets()
        .where(T.active == true(), T.next_run_at <= now)
        .order_by(T.next_run_at)
        .limit(limit)
        .with_for_update(of=T, skip_locked=True)
    )
    rows: Sequence[Row[Any]] = (await conn.execute(query)).all()
    return rows


def select_targets() -> Select[*tuple[Any, ...]]:
    """The columns of a target (with its website's) that :func:`plan_target` and :func:`outbox_row` read."""
    T, W = ScrapeTarget, Website
    query: Select[*tuple[Any, ...]] = (
        select(
            T.id,
            T.website_id,
            T.keywords,
            T.location,
            T.schedule_kind,
            T.interval_seconds,
            T.cron,
            T.timezone,
            T.anchor_at,
            T.jitter_ms,
            T.misfire_policy,
            T.backfill_limit,
            T.misfire_grace_seconds,
            T.next_run_at,
            W.name,
            W.base_url,
            W.search_url_template,
            W.requires_playwright,
            W.pagination_type,
            W.pagination,
            W.extraction,
            W.site_metadata.label("site_metadata"),
            W.min_delay,
            W.max_concurrency,
            W.robots_policy,
        )
        .join(W, W.id == T.website_id)
    )
    return query


def plan_target(row: Row[Any], *, now: datetime, max_slots: int) -> TargetPlan:
    """The slots ``row`` owes at ``now`` and their outbox rows. A target that cannot be scheduled is
    logged and retried in :data:`BROKEN_TARGET_RETRY`; it never stops the others."""
    jitter = timedelta(milliseconds=row.jitter_ms)
    try:
        plan = plan_slots(
            schedule_of(row),
            next_slot=row.next_run_at - jitter,
            now=now - jitter,
            misfire=row.misfire_policy,
            backfill_limit=row.backfill_limit,
            grace=timedelta(seconds=row.misfire_grace_seconds),
            max_slots=max_slots,
        )
        result = TargetPlan(
            target_id=row.id,
            next_run_at=plan.next_slot + jitter,
            last_scheduled=plan.slots[-1] if plan.slots else None,
        )
        for slot in plan.slots:
            result.outbox.append(outbox_row(row, slot, now))
    except CrawlherdError as exc:
        log.error("target %d cannot be scheduled (%s); retrying in %s", row.id, exc, BROKEN_TARGET_RETRY)
        return TargetPlan(target_id=row.id, next_run_at=now + BROKEN_TARGET_RETRY)
    if plan.skipped:
        log.info("target %d: missed slots skipped by misfire policy %s", row.id, row.misfire_policy)
    return result


def outbox_row(row: Row[Any], slot: datetime, now: datetime) -> dict[str, Any]:
    """The outbox row (ready to publish at ``now``) of ``row``'s target for ``slot``."""
    message = _job_message(row, slot, now)
    return {
        "target_id": row.id,
        "slot_at": slot,
        "key": message.idempotency_key,
        "status": "pending",
        "attempts": 0,
        "leased_until": now,
        "body": encode_job(message).decode(),
        "created_at": now,
    }


def _job_message(row: Row[Any], slot: datetime, now: datetime) -> JobMessage:
    """The job message of ``row``'s target for ``slot``."""
    return JobMessage.for_slot(
        target_id=row.id,
        slot_at=slot,
        created_at=now,
        website_id=row.website_id,
        website_name=row.name,
        search_url=render_search_url(row.search_url_template, keywords=row.keywords, location=row.location),
        requires_playwright=row.requires_playwright,
        pagination_type=row.pagination_type,
        keywords_used=row.keywords,
        location_used=row.location or None,
        metadata={
            "base_url": row.base_url,
            "pagination": row.pagination,
            "extraction": row.extraction,
            "politeness": {
                "min_delay": row.min_delay,
                "max_concurrency": row.max_concurrency,
                "robots": row.robots_policy,
            },
            "site": row.site_metadata,
        },
    )


async def write_outbox(conn: AsyncConnection, rows: list[dict[str, Any]], *, claimed_by: str | None = None) -> int:
    """Insert ``rows`` into the outbox, ``ON CONFLICT DO NOTHING``; how many were really inserted.
    With ``claimed_by``, each inserted row's claimer is recorded in ``outbox_trail``."""
    if not rows:
        return 0
    # executemany of one cached statement (SQLAlchemy batches it into multi-row INSERTs);
    # RETURNING lists only the rows really inserted (not those the unique key turned away).
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = insert(_OUTBOX).on_conflict_do_nothing(index_elements=["target_id", "slot_at"]).returning(_OUTBOX.c.id)
    ids = [row[0] for row in (await conn.execute(stmt, rows)).all()]
    if ids and claimed_by is not None:
        await conn.execute(insert(_TRAIL), [{"outbox_id": i, "claimed_by": claimed_by[:200]} for i in ids])
    return len(ids)


async def advance_targets(conn: AsyncConnection, plans: Sequence[TargetPlan], *, now: datetime) -> None:
    """Move each planned target's ``next_run_at`` (and ``last_scheduled`` when it emitted a slot)."""
    await conn.execute(
        update(_TARGETS)
        .where(_TARGETS.c.id == bindparam("b_id"))
        .values(
            next_run_at=bindparam("b_next", type_=UTCDateTime()),
            last_scheduled=func.coalesce(bindparam("b_last", type_=UTCDateTime()), _TARGETS.c.last_scheduled),
            updated_at=now,
        ),
        [{"b_id": p.target_id, "b_next": p.next_run_at, "b_last": p.last_scheduled} for p in plans],
    )
