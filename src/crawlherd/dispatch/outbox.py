"""The tick: due targets -> outbox rows, in one transaction on the **database clock**.

Steps (each a function below), a few statements per batch whatever its size:

1. :func:`claim_due` -- lock up to ``batch_size`` due targets, oldest ``next_run_at`` first, in one
   ``SELECT ... FOR UPDATE SKIP LOCKED`` on the partial index ``ix_scrape_targets_due`` (SQLite:
   the transaction is ``BEGIN IMMEDIATE``), and their websites in one more ``SELECT`` (each website's
   JSON columns are read once per tick, not once per target).
2. :func:`plan_targets` -- the slots each one owes (its schedule, misfire policy and jitter), planned
   once per distinct timing in the batch, and the job message of every slot (the website's part
   serialised once per tick, :class:`~crawlherd.messages.SlotBodies`, as :func:`outbox_row` does).
   Schedules are built once per distinct definition in a tick and cron slots looked up once per
   distinct (expression, zone, time) (:class:`ScheduleCache`); interval slots are arithmetic.
3. :func:`write_outbox` -- one outbox row per (target, slot), ``ON CONFLICT DO NOTHING``: one
   ``INSERT ... SELECT FROM unnest(arrays)`` on PostgreSQL, one ``executemany`` on SQLite.
4. :func:`advance_targets` -- ``last_scheduled`` and ``next_run_at`` move on, anchored to the slot
   (no drift): one ``UPDATE ... FROM unnest(arrays)`` on PostgreSQL, one ``executemany`` on SQLite.

All four run in one transaction: a target is claimed by exactly one dispatcher at a time and its
slots move forward in the same commit as its outbox rows, so each (target, slot) is written once; the
unique key ``(target_id, slot_at)`` makes a second write impossible anyway. The tick never talks to
the broker: scheduling goes on whatever the broker does (the relay, :mod:`crawlherd.dispatch.relay`,
publishes the rows). Its cost grows with the number of due targets, not with the table
(``bench/tick_scale.py`` measures it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    Row,
    Select,
    Table,
    Text,
    bindparam,
    column,
    func,
    insert,
    literal,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd import metrics
from crawlherd.db.dialect import sql_capabilities
from crawlherd.db.engine import db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import DispatchOutbox, OutboxTrail, ScrapeTarget, UTCDateTime, Website
from crawlherd.dispatch.schedule import CronSchedule, Schedule, plan_slots, schedule_of
from crawlherd.errors import ConfigurationError, CrawlherdError
from crawlherd.messages import SlotBodies
from crawlherd.sitespec import SiteSpec

__all__ = [
    "ClaimedTarget",
    "LeasedRow",
    "ScheduleCache",
    "TickResult",
    "advance_targets",
    "claim_due",
    "custom_plans",
    "load_targets",
    "lock_target",
    "outbox_row",
    "plan_target",
    "plan_targets",
    "tick",
    "write_outbox",
]

log = logging.getLogger(__name__)

_OUTBOX = cast(Table, DispatchOutbox.__table__)
_TARGETS = cast(Table, ScrapeTarget.__table__)
_TRAIL = cast(Table, OutboxTrail.__table__)
#: How long a target that cannot be scheduled (edited by hand into an unusable state) waits.
BROKEN_TARGET_RETRY = timedelta(hours=1)
_TSTZ = DateTime(timezone=True)
_ACTIVE = text("scrape_targets.active")
#: The target columns the tick reads (not the bookkeeping ones: fewer values to convert per row).
_CLAIMED = [
    c for c in _TARGETS.c if c.name not in ("active", "last_scheduled", "created_at", "updated_at")
]


@dataclass(frozen=True, slots=True)
class LeasedRow:
    """An outbox row a relay holds the lease of."""

    id: int
    key: str
    body: str
    attempts: int
    slot_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class TickResult:
    """One tick (or several, summed): targets claimed, slots planned, outbox rows actually inserted;
    ``leased``: the rows one tick wrote already leased to its relay (see :func:`tick`; not summed)."""

    targets: int = 0
    slots: int = 0
    inserted: int = 0
    leased: tuple[LeasedRow, ...] = field(default=(), repr=False, compare=False)

    def __add__(self, other: TickResult) -> TickResult:
        return TickResult(self.targets + other.targets, self.slots + other.slots, self.inserted + other.inserted)


@dataclass(slots=True)
class TargetPlan:
    """What the tick does for one claimed target: its outbox rows and where its schedule moves."""

    target_id: int
    next_run_at: datetime
    last_scheduled: datetime | None = None
    outbox: list[dict[str, Any]] = field(default_factory=list)


class ClaimedTarget:
    """A claimed target row and its website row read as one: an attribute is the target's column of
    that name, else the website's (by ORM attribute name: ``name``, ``base_url``, ``site_metadata``
    ...). ``id`` is the target's."""

    def __init__(self, target: Row[Any], site: dict[str, Any], columns: Sequence[str] | None = None) -> None:
        self.__dict__.update(site)
        # ``columns``: the target row's names, once per result (cheaper than ``Row._asdict()`` per row)
        self.__dict__.update(target._asdict() if columns is None else zip(columns, target, strict=True))

    def __getattr__(self, name: str) -> Any:  # for mypy: the columns are set in __init__
        raise AttributeError(name)


class _MemoCron:
    """A cron schedule whose look-ups are remembered (many targets share an expression and a slot)."""

    __slots__ = ("_next", "_prev", "schedule")

    def __init__(self, schedule: CronSchedule) -> None:
        self.schedule = schedule
        self._next: dict[datetime, datetime] = {}
        self._prev: dict[datetime, datetime | None] = {}

    def next_after(self, t: datetime) -> datetime:
        slot = self._next.get(t)
        if slot is None:
            slot = self._next[t] = self.schedule.next_after(t)
        return slot

    def prev_before(self, t: datetime) -> datetime | None:
        if t not in self._prev:
            self._prev[t] = self.schedule.prev_before(t)
        return self._prev[t]


class ScheduleCache:
    """The schedules of one tick: each distinct definition is built (and validated) once; a cron
    schedule is shared per (expression, zone) and remembers its slot look-ups."""

    def __init__(self) -> None:
        self._schedules: dict[tuple[Any, ...], Schedule] = {}

    def of(self, row: Any) -> Schedule:
        """The schedule of ``row`` (raises :class:`~crawlherd.errors.ScheduleError` when unusable)."""
        if row.schedule_kind == "cron":
            key: tuple[Any, ...] = ("cron", row.cron, row.timezone)
        else:
            key = (row.schedule_kind, row.interval_seconds, row.timezone, row.anchor_at)
        schedule = self._schedules.get(key)
        if schedule is None:
            schedule = schedule_of(row)
            if isinstance(schedule, CronSchedule):
                schedule = _MemoCron(schedule)
            self._schedules[key] = schedule
        return schedule


async def tick(
    engine: AsyncEngine,
    *,
    batch_size: int,
    max_slots_per_target: int,
    owner: str | None = None,
    lease_for: timedelta | None = None,
    lease_max: int = 1000,
) -> TickResult:
    """Claim up to ``batch_size`` due targets and write their slots to the outbox, in one transaction;
    ``owner`` (the dispatcher's name) is recorded as the claimer of each row (``outbox_trail``).
    With ``lease_for`` (PostgreSQL; SQLite ignores it), the rows -- when there are at most
    ``lease_max`` of them (one relay round's worth) -- are written already leased to ``owner`` (its
    relay) for that long, their first attempt, and returned in ``TickResult.leased``:
    the relay publishes them without a lease ``UPDATE`` of its own -- or, if it does not, another
    relay takes them when the lease has run out, as after any relay's crash.
    A database outage raises :class:`~crawlherd.errors.BackendUnavailableError`."""
    if lease_for is not None and owner is None:
        raise ConfigurationError("a tick that leases its rows needs the owner (relay) to lease them to")
    with translate_db_errors("during the tick"):
        async with engine.begin() as conn:
            now = await custom_plans(conn)
            rows = await claim_due(conn, now=now, limit=batch_size)
            if not rows:
                return TickResult()
            plans = plan_targets(rows, now=now, max_slots=max_slots_per_target)
            outbox_rows = [r for p in plans for r in p.outbox]
            leased: list[LeasedRow] = []
            if (
                lease_for is not None
                and owner is not None
                and len(outbox_rows) <= lease_max
                and sql_capabilities(conn).array_params
            ):
                leased = await _insert_leased(conn, outbox_rows, now=now, owner=owner, until=now + lease_for)
                inserted = len(leased)
            else:
                inserted = await write_outbox(conn, outbox_rows, now=now, claimed_by=owner)
            await advance_targets(conn, plans, now=now)
    metrics.OUTBOX_WRITTEN.inc(inserted)
    return TickResult(
        targets=len(rows), slots=sum(len(p.outbox) for p in plans), inserted=inserted, leased=tuple(leased)
    )


async def custom_plans(conn: AsyncConnection) -> datetime:
    """PostgreSQL: plan this transaction's statements for their parameters and the table as it is now;
    returns the database's clock (:func:`~crawlherd.db.engine.db_now`), read in the same round trip.
    asyncpg prepares every statement, and after five runs PostgreSQL may switch to a *generic* plan
    cached for the connection; one made while the outbox was (nearly) empty joins the lease by nested
    loops over the whole table and stays until the next ANALYZE -- seconds per batch after a burst."""
    if not sql_capabilities(conn).plan_cache_mode:
        return await db_now(conn)
    value = (await conn.execute(_CUSTOM_PLANS_NOW)).scalar_one()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


# set_config(..., true) is SET LOCAL: for this transaction only.
_CUSTOM_PLANS_NOW = text("SELECT now() FROM set_config('plan_cache_mode', 'force_custom_plan', true)")


def _site_columns() -> list[Any]:
    mapper = Website.__mapper__
    return [getattr(Website, key).label(key) for key in mapper.column_attrs.keys()]  # noqa: SIM118


async def claim_due(conn: AsyncConnection, *, now: datetime, limit: int) -> list[ClaimedTarget]:
    """Lock and return up to ``limit`` active targets due at ``now``, each with its website's columns."""
    # The bare column, as in the partial index's WHERE (SQLite uses a partial index only for the very
    # same term; ``active = 1`` would scan the whole table).
    query = (
        select(*_CLAIMED)
        .where(_ACTIVE, _TARGETS.c.next_run_at <= now)
        .order_by(_TARGETS.c.next_run_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return await load_targets(conn, query)


async def lock_target(conn: AsyncConnection, target_id: int) -> ClaimedTarget | None:
    """Lock one target (active or not) and return it with its website's columns, for an ad-hoc run."""
    query = select(*_CLAIMED).where(_TARGETS.c.id == target_id).with_for_update()
    found = await load_targets(conn, query)
    return found[0] if found else None


async def load_targets(conn: AsyncConnection, query: Select[Any]) -> list[ClaimedTarget]:
    """The targets ``query`` (a select of the claimed columns) returns, each with its website's
    columns; the websites are read once each, their stored ``SiteSpec`` validated once."""
    result = await conn.execute(query)
    columns = list(result.keys())
    claimed = result.all()
    if not claimed:
        return []
    site_ids = sorted({row.website_id for row in claimed})
    sites = {
        row.id: _with_spec(row._asdict())
        for row in (await conn.execute(select(*_site_columns()).where(Website.id.in_(site_ids)))).all()
    }
    # A target's website cannot go away under its lock (deleting it deletes the target first).
    return [ClaimedTarget(row, sites[row.website_id], columns) for row in claimed]


def plan_target(
    row: Any,
    *,
    now: datetime,
    max_slots: int,
    schedules: ScheduleCache | None = None,
    bodies: dict[tuple[int, datetime], SlotBodies] | None = None,
) -> TargetPlan:
    """The slots ``row`` owes at ``now`` and their outbox rows (:func:`plan_targets` of one row). A
    target that cannot be scheduled is logged and retried in :data:`BROKEN_TARGET_RETRY`; it never
    stops the others. ``schedules`` and ``bodies`` (:func:`outbox_row`) are the tick's caches."""
    return plan_targets([row], now=now, max_slots=max_slots, schedules=schedules, bodies=bodies)[0]


@dataclass(frozen=True, slots=True)
class _Timing:
    """Where one timing (schedule, next slot, jitter, misfire policy) stands at the tick's ``now``."""

    slots: tuple[datetime, ...]
    next_run_at: datetime
    last_scheduled: datetime | None
    skipped: bool


def plan_targets(
    rows: Sequence[Any],
    *,
    now: datetime,
    max_slots: int,
    schedules: ScheduleCache | None = None,
    bodies: dict[tuple[int, datetime], SlotBodies] | None = None,
) -> list[TargetPlan]:
    """:func:`plan_target` of each of ``rows``, in one pass: the slots are planned once per distinct
    timing in the batch (schedule, next slot, jitter, misfire policy -- targets imported together
    share one), each target's search URL is rendered once for all its slots."""
    schedules = schedules or ScheduleCache()
    bodies = {} if bodies is None else bodies
    timings: dict[tuple[Any, ...], _Timing | CrawlherdError] = {}
    plans: list[TargetPlan] = []
    for row in rows:
        timing_key = (
            row.schedule_kind, row.interval_seconds, row.cron, row.timezone, row.anchor_at, row.next_run_at,
            row.jitter_ms, row.misfire_policy, row.backfill_limit, row.misfire_grace_seconds,
        )
        timing = timings.get(timing_key)
        if timing is None:
            timing = timings[timing_key] = _timing(row, now=now, max_slots=max_slots, schedules=schedules)
        if isinstance(timing, CrawlherdError):
            plans.append(_broken(row, timing, now))
            continue
        plan = TargetPlan(row.id, timing.next_run_at, timing.last_scheduled)
        try:
            if timing.slots:
                site = _slot_bodies(row, now, bodies)
                keywords, location = row.keywords, row.location
                url = site.site.search_url(keywords=keywords, location=location)
                for slot in timing.slots:
                    key, body = site.encode(target_id=row.id, slot_at=slot, search_url=url,
                                            keywords_used=keywords, location_used=location or None)
                    plan.outbox.append({"target_id": row.id, "slot_at": slot, "key": key, "body": body})
        except CrawlherdError as exc:
            plans.append(_broken(row, exc, now))
            continue
        if timing.skipped:
            log.info("target %d: missed slots skipped by misfire policy %s", row.id, row.misfire_policy)
        plans.append(plan)
    return plans


def _broken(row: Any, error: CrawlherdError, now: datetime) -> TargetPlan:
    """The plan of a target that cannot be scheduled: said, and tried again in :data:`BROKEN_TARGET_RETRY`."""
    log.error("target %d cannot be scheduled (%s); retrying in %s", row.id, error, BROKEN_TARGET_RETRY)
    return TargetPlan(target_id=row.id, next_run_at=now + BROKEN_TARGET_RETRY)


def _timing(row: Any, *, now: datetime, max_slots: int, schedules: ScheduleCache) -> _Timing | CrawlherdError:
    """The slots ``row``'s timing owes at ``now`` (pure: the same for every target of that timing),
    or why it cannot be scheduled."""
    jitter = timedelta(milliseconds=row.jitter_ms)
    try:
        plan = plan_slots(
            schedules.of(row),
            next_slot=row.next_run_at - jitter,
            now=now - jitter,
            misfire=row.misfire_policy,
            backfill_limit=row.backfill_limit,
            grace=timedelta(seconds=row.misfire_grace_seconds),
            max_slots=max_slots,
        )
    except CrawlherdError as exc:
        return exc
    return _Timing(plan.slots, plan.next_slot + jitter, plan.slots[-1] if plan.slots else None, plan.skipped)


def outbox_row(
    row: Any, slot: datetime, now: datetime, bodies: dict[tuple[int, datetime], SlotBodies] | None = None
) -> dict[str, Any]:
    """The outbox row of ``row``'s target for ``slot``: ``target_id``, ``slot_at``, ``key``, ``body``
    (the job message created at ``now``). ``bodies``: the tick's encoders, one per website."""
    site = _slot_bodies(row, now, bodies)
    key, body = site.encode(
        target_id=row.id,
        slot_at=slot,
        search_url=site.site.search_url(keywords=row.keywords, location=row.location),
        keywords_used=row.keywords,
        location_used=row.location or None,
    )
    return {"target_id": row.id, "slot_at": slot, "key": key, "body": body}


def _with_spec(site: dict[str, Any]) -> dict[str, Any]:
    """The website's columns with its stored spec validated once per tick: ``site`` (the
    :class:`SiteSpec`) or ``site_error`` (why the stored spec is no longer valid)."""
    try:
        site["site"], site["site_error"] = SiteSpec.model_validate(site["spec"]), None
    except ValidationError as exc:
        site["site"], site["site_error"] = None, f"stored spec is invalid: {exc}"
    return site


def _slot_bodies(row: Any, now: datetime, bodies: dict[tuple[int, datetime], SlotBodies] | None) -> SlotBodies:
    """The encoder of the job messages of ``row``'s website created at ``now`` (one per website and
    tick, in ``bodies``): the website's :class:`SiteSpec` travels typed. A stored spec that no longer
    validates raises ConfigurationError (the tick sets that target aside)."""
    site: SiteSpec | None = row.site
    if site is None:
        raise ConfigurationError(f"website of target {row.id}: {row.site_error}")
    cache = {} if bodies is None else bodies
    encoder = cache.get((row.website_id, now))
    if encoder is None:
        encoder = cache[(row.website_id, now)] = SlotBodies(website_id=row.website_id, site=site, created_at=now)
    return encoder


async def write_outbox(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]], *, now: datetime, claimed_by: str | None = None
) -> int:
    """Insert ``rows`` (``target_id``, ``slot_at``, ``key``, ``body``) into the outbox as pending rows
    created at ``now``, ``ON CONFLICT DO NOTHING``; how many were really inserted. With ``claimed_by``,
    the claimer of each inserted row is recorded in ``outbox_trail`` (the lineage)."""
    if not rows:
        return 0
    sql = sql_capabilities(conn)
    if sql.array_params:
        result = await conn.execute(_PG_INSERT, _pg_insert_params(rows, now=now, claimed_by=claimed_by))
        return len(result.all())
    # SQLite: one executemany in the tick's BEGIN IMMEDIATE transaction; rows the unique key turned
    # away are not counted.
    stmt = sql.insert(_OUTBOX).on_conflict_do_nothing(index_elements=["target_id", "slot_at"])
    params = [
        {**r, "status": "pending", "attempts": 0, "leased_until": now, "created_at": now} for r in rows
    ]
    inserted = int((await conn.execute(stmt, params)).rowcount)
    if inserted and claimed_by is not None:
        # The rows this transaction inserted: created at ``now`` (the transaction's clock), found by
        # their (target_id, slot_at) -- the unique key's index, so the cost follows the batch, not the table.
        pairs = tuple_(_OUTBOX.c.target_id, _OUTBOX.c.slot_at).in_([(r["target_id"], r["slot_at"]) for r in rows])
        new_rows = select(_OUTBOX.c.id, literal(claimed_by[:200])).where(pairs, _OUTBOX.c.created_at == now)
        await conn.execute(insert(_TRAIL).from_select(["outbox_id", "claimed_by"], new_rows))
    return inserted


async def _insert_leased(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]], *, now: datetime, owner: str, until: datetime
) -> list[LeasedRow]:
    """PostgreSQL: :func:`write_outbox` with the rows leased to ``owner`` until ``until`` (first
    attempt); the rows really inserted, as the relay's :class:`LeasedRow` s, in id order."""
    if not rows:
        return []
    params = _pg_insert_params(rows, now=now, claimed_by=owner)
    params.update(leased_until=until, lease_owner=owner, attempts=1)
    inserted = (await conn.execute(_PG_INSERT, params)).all()
    by_slot = {(r["target_id"], r["slot_at"]): r for r in rows}
    leased = []
    for row_id, target_id, slot_at in sorted(inserted, key=itemgetter(0)):  # by id (unique): no row comparisons
        row = by_slot[(target_id, slot_at)]
        leased.append(LeasedRow(row_id, row["key"], row["body"], 1, slot_at))
    return leased


def _pg_insert_params(rows: Sequence[dict[str, Any]], *, now: datetime, claimed_by: str | None) -> dict[str, Any]:
    return {
        "t": [r["target_id"] for r in rows],
        "s": [r["slot_at"] for r in rows],
        "k": [r["key"] for r in rows],
        "b": [r["body"] for r in rows],
        "now": now,
        "by": None if claimed_by is None else claimed_by[:200],
        "leased_until": now,
        "lease_owner": None,
        "attempts": 0,
    }


# One statement of four arrays, whatever the batch size (one prepared statement, reused); the trail
# rows are those the INSERT returned (no second look-up), and so are the rows returned.
_PG_INSERT = text(
    "WITH inserted AS ("
    "INSERT INTO dispatch_outbox (target_id, slot_at, key, status, attempts, leased_until, lease_owner, body, "
    "created_at) "
    "SELECT v.t, v.s, v.k, 'pending', :attempts, :leased_until, :lease_owner, v.b, :now "
    "FROM unnest(:t, :s, :k, :b) AS v(t, s, k, b) "
    "ON CONFLICT (target_id, slot_at) DO NOTHING RETURNING id, target_id, slot_at), "
    "trail AS (INSERT INTO outbox_trail (outbox_id, claimed_by) SELECT id, :by FROM inserted WHERE :by IS NOT NULL) "
    "SELECT id, target_id, slot_at FROM inserted"
).bindparams(
    bindparam("t", type_=postgresql.ARRAY(BigInteger)),
    bindparam("s", type_=postgresql.ARRAY(_TSTZ)),
    bindparam("k", type_=postgresql.ARRAY(Text)),
    bindparam("b", type_=postgresql.ARRAY(Text)),
    bindparam("now", type_=_TSTZ),
    bindparam("by", type_=Text),
    bindparam("leased_until", type_=_TSTZ),
    bindparam("lease_owner", type_=Text),
    bindparam("attempts", type_=Integer),
)


async def advance_targets(conn: AsyncConnection, plans: Sequence[TargetPlan], *, now: datetime) -> None:
    """Move each planned target's ``next_run_at`` (and ``last_scheduled`` when it emitted a slot)."""
    if not plans:
        return
    if sql_capabilities(conn).array_params:
        moves = func.unnest(
            bindparam("ids", type_=postgresql.ARRAY(BigInteger)),
            bindparam("nexts", type_=postgresql.ARRAY(_TSTZ)),
            bindparam("lasts", type_=postgresql.ARRAY(_TSTZ)),
        ).table_valued(column("id", BigInteger), column("next", _TSTZ), column("last", _TSTZ)).render_derived("v")
        await conn.execute(
            update(_TARGETS)
            .where(_TARGETS.c.id == moves.c.id)
            .values(
                next_run_at=moves.c.next,
                last_scheduled=func.coalesce(moves.c.last, _TARGETS.c.last_scheduled),
                updated_at=now,
            ),
            {
                "ids": [p.target_id for p in plans],
                "nexts": [p.next_run_at for p in plans],
                "lasts": [p.last_scheduled for p in plans],
            },
        )
        return
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
