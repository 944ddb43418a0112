"""The dispatcher service: due targets -> outbox (the tick) -> broker (the relay).

**Tick** (:meth:`DispatchService.tick`), one transaction on the **database clock**: claim due targets
(``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite transactions are ``BEGIN IMMEDIATE``), insert one
outbox row per (target, slot) ``ON CONFLICT DO NOTHING``, advance ``last_scheduled`` and
``next_run_at`` (anchored to the slot). Commit. A target is claimed by exactly one dispatcher at a time
and its slots move forward in the same commit as the outbox rows, so each (target, slot) is written
once; the unique key makes a second write impossible anyway.

**Relay** (:meth:`DispatchService.relay`): lease pending outbox rows (a lease is ``leased_until`` in the
database clock, taken with ``SKIP LOCKED``), publish each with its idempotency key, and mark the
confirmed ones published. A failed publish keeps its row and retries after exponential backoff. A
dispatcher that dies between publish and mark leaves the lease to expire; another dispatcher
publishes the row again, with the same body and key: a duplicate the workers drop, never a loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Table, bindparam, func, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.brokers.base import Broker
from crawlherd.db.engine import db_now
from crawlherd.db.models import DispatchOutbox, ScrapeTarget, UTCDateTime, Website
from crawlherd.errors import BackendUnavailableError, ConfigurationError, CrawlherdError
from crawlherd.messages import JobMessage, encode_job
from crawlherd.service.schedule import make_schedule, plan_slots
from crawlherd.sitespec import SiteSpec

__all__ = ["DispatchService", "RelayResult", "TickResult"]

log = logging.getLogger(__name__)

_OUTBOX = cast(Table, DispatchOutbox.__table__)
_TARGETS = cast(Table, ScrapeTarget.__table__)
_INSERT_CHUNK = 1000  # rows per INSERT statement (keeps under the drivers' parameter limits)
_BROKEN_TARGET_RETRY = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class TickResult:
    """One tick: targets claimed, slots planned, outbox rows actually inserted."""

    targets: int = 0
    slots: int = 0
    inserted: int = 0


@dataclass(frozen=True, slots=True)
class RelayResult:
    """One relay pass: rows leased, published (confirmed and marked), and failed (kept for a retry)."""

    leased: int = 0
    published: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class _Leased:
    id: int
    key: str
    body: str
    attempts: int


def _db_errors(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError | InterfaceError | DBAPIError | OSError | ConnectionError)


class DispatchService:
    """Turns due scrape targets into job messages on ``broker``, exactly once per (target, slot).

    Any number of dispatchers may share one database. ``engine`` and ``broker`` are owned by the caller.

    Options (keyword-only, validated here): ``batch_size`` targets claimed per tick transaction;
    ``relay_batch`` outbox rows leased per relay pass; ``lease`` how long a leased row is ours (must
    exceed the time to publish a batch, else another dispatcher may publish it too -- a duplicate,
    never a loss); ``publish_concurrency`` publishes in flight; ``publish_timeout`` per publish;
    ``backoff`` / ``max_backoff`` for failed publishes (doubling per attempt); ``max_slots_per_target``
    slots one target may emit in one tick.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        broker: Broker,
        *,
        batch_size: int = 500,
        relay_batch: int = 500,
        lease: float = 60.0,
        publish_concurrency: int = 32,
        publish_timeout: float = 10.0,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        max_slots_per_target: int = 1000,
        owner: str | None = None,
    ) -> None:
        for name, value in (
            ("batch_size", batch_size),
            ("relay_batch", relay_batch),
            ("publish_concurrency", publish_concurrency),
            ("max_slots_per_target", max_slots_per_target),
        ):
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be an integer >= 1, got {value!r}")
        for name, fvalue in (("lease", lease), ("publish_timeout", publish_timeout), ("max_backoff", max_backoff)):
            if not fvalue > 0:
                raise ConfigurationError(f"{name} must be > 0 seconds, got {fvalue!r}")
        if backoff < 0:
            raise ConfigurationError(f"backoff must be >= 0 seconds, got {backoff!r}")
        self.engine = engine
        self.broker = broker
        self.batch_size = batch_size
        self.relay_batch = relay_batch
        self.lease = timedelta(seconds=lease)
        self.publish_concurrency = publish_concurrency
        self.publish_timeout = publish_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_slots_per_target = max_slots_per_target
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._dialect = engine.dialect.name

    # -- the tick ---------------------------------------------------------------------------------

    async def tick(self) -> TickResult:
        """Claim up to ``batch_size`` due targets and write their slots to the outbox (one transaction)."""
        try:
            async with self.engine.begin() as conn:
                return await self._tick(conn)
        except CrawlherdError:
            raise
        except Exception as exc:
            if _db_errors(exc):
                raise BackendUnavailableError(
                    f"config DB failed during the tick: {_short(exc)}", backend="database"
                ) from exc
            raise

    async def _tick(self, conn: AsyncConnection) -> TickResult:
        now = await db_now(conn)
        T, W = ScrapeTarget, Website
        rows = (
            await conn.execute(
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
                    W.spec,
                )
                .join(W, W.id == T.website_id)
                .where(T.active == true(), T.next_run_at <= now)
                .order_by(T.next_run_at)
                .limit(self.batch_size)
                .with_for_update(of=T, skip_locked=True)
            )
        ).all()
        if not rows:
            return TickResult()
        outbox: list[dict[str, Any]] = []
        advances: list[dict[str, Any]] = []
        for row in rows:
            jitter = timedelta(milliseconds=row.jitter_ms)
            try:
                schedule = make_schedule(
                    kind=row.schedule_kind,
                    interval_seconds=row.interval_seconds,
                    cron=row.cron,
                    timezone=row.timezone,
                    anchor_at=row.anchor_at,
                )
                plan = plan_slots(
                    schedule,
                    next_slot=row.next_run_at - jitter,
                    now=now - jitter,
                    misfire=row.misfire_policy,
                    backfill_limit=row.backfill_limit,
                    grace=timedelta(seconds=row.misfire_grace_seconds),
                    max_slots=self.max_slots_per_target,
                )
                for slot in plan.slots:
                    message = _job_message(row, slot, now)
                    outbox.append(
                        {
                            "target_id": row.id,
                            "slot_at": slot,
                            "key": message.idempotency_key,
                            "status": "pending",
                            "attempts": 0,
                            "leased_until": now,
                            "body": encode_job(message).decode(),
                            "created_at": now,
                        }
                    )
                if plan.skipped:
                    log.info("target %d: missed slots skipped by misfire policy %s", row.id, row.misfire_policy)
                advances.append(
                    {
                        "b_id": row.id,
                        "b_next": plan.next_slot + jitter,
                        "b_last": plan.slots[-1] if plan.slots else None,
                    }
                )
            except CrawlherdError as exc:
                # One broken target (edited by hand into an unusable state) must not stop the others.
                log.error("target %d cannot be scheduled (%s); retrying in %s", row.id, exc, _BROKEN_TARGET_RETRY)
                advances.append({"b_id": row.id, "b_next": now + _BROKEN_TARGET_RETRY, "b_last": None})
        inserted = 0
        if outbox:
            # executemany of one cached statement (SQLAlchemy batches it into multi-row INSERTs);
            # RETURNING lists only the rows really inserted (not those the unique key turned away).
            insert = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
            stmt = (
                insert(_OUTBOX).on_conflict_do_nothing(index_elements=["target_id", "slot_at"]).returning(_OUTBOX.c.id)
            )
            inserted = len((await conn.execute(stmt, outbox)).all())
        await conn.execute(
            update(_TARGETS)
            .where(_TARGETS.c.id == bindparam("b_id"))
            .values(
                next_run_at=bindparam("b_next", type_=UTCDateTime()),
                last_scheduled=func.coalesce(bindparam("b_last", type_=UTCDateTime()), _TARGETS.c.last_scheduled),
                updated_at=now,
            ),
            advances,
        )
        return TickResult(targets=len(rows), slots=len(outbox), inserted=inserted)

    async def dispatch_due(self) -> TickResult:
        """Tick until no target is due; the totals."""
        targets = slots = inserted = 0
        while True:
            result = await self.tick()
            targets, slots, inserted = targets + result.targets, slots + result.slots, inserted + result.inserted
            if result.targets < self.batch_size:
                return TickResult(targets, slots, inserted)

    # -- the relay --------------------------------------------------------------------------------

    async def relay(self) -> RelayResult:
        """Lease up to ``relay_batch`` pending outbox rows, publish them, mark the confirmed ones."""
        leased = await self._lease()
        if not leased:
            return RelayResult()
        confirmed: list[int] = []
        failures: list[tuple[_Leased, str]] = []
        semaphore = asyncio.Semaphore(self.publish_concurrency)

        async def publish(row: _Leased) -> None:
            async with semaphore:
                try:
                    await asyncio.wait_for(
                        self.broker.publish(row.body.encode(), key=row.key, headers={"schema_version": "1"}),
                        self.publish_timeout,
                    )
                except Exception as exc:  # noqa: BLE001 - any failure keeps the row for a retry
                    failures.append((row, _short(exc)))
                else:
                    confirmed.append(row.id)

        try:
            async with asyncio.TaskGroup() as group:
                for row in leased:
                    group.create_task(publish(row), name=f"publish:{row.key}")
        finally:
            # Also on cancellation (shutdown): record what the broker confirmed, release the rest.
            settled = {*confirmed, *(row.id for row, _ in failures)}
            released = [r for r in leased if r.id not in settled]
            await asyncio.shield(self._settle(confirmed, failures, released))
        if failures:
            log.warning(
                "%d publish(es) failed, kept in the outbox for a retry; first: %s: %s",
                len(failures),
                failures[0][0].key,
                failures[0][1],
            )
        return RelayResult(leased=len(leased), published=len(confirmed), failed=len(failures))

    async def relay_all(self) -> RelayResult:
        """Relay until nothing is ready to publish (rows waiting for a retry are left to wait)."""
        leased = published = failed = 0
        while True:
            result = await self.relay()
            leased, published, failed = leased + result.leased, published + result.published, failed + result.failed
            if result.leased < self.relay_batch or result.failed:
                return RelayResult(leased, published, failed)

    async def _lease(self) -> list[_Leased]:
        ob = DispatchOutbox
        try:
            async with self.engine.begin() as conn:
                now = await db_now(conn)
                ids = (
                    select(ob.id)
                    .where(ob.status == "pending", ob.leased_until <= now)
                    .order_by(ob.leased_until, ob.id)
                    .limit(self.relay_batch)
                    .with_for_update(skip_locked=True)
                    .scalar_subquery()
                )
                rows = (
                    await conn.execute(
                        update(ob)
                        .where(ob.id.in_(ids))
                        .values(leased_until=now + self.lease, lease_owner=self.owner, attempts=ob.attempts + 1)
                        .returning(ob.id, ob.key, ob.body, ob.attempts)
                    )
                ).all()
        except Exception as exc:
            if _db_errors(exc):
                raise BackendUnavailableError(
                    f"config DB failed leasing outbox rows: {_short(exc)}", backend="database"
                ) from exc
            raise
        return sorted((_Leased(r.id, r.key, r.body, r.attempts) for r in rows), key=lambda r: r.id)

    async def _settle(
        self, confirmed: Sequence[int], failures: Sequence[tuple[_Leased, str]], released: Sequence[_Leased]
    ) -> None:
        if not (confirmed or failures or released):
            return
        try:
            await self._settle_rows(confirmed, failures, released)
        except Exception as exc:
            if _db_errors(exc):
                # The leases run out and the rows are published again: duplicates, never a loss.
                raise BackendUnavailableError(
                    f"config DB failed marking {len(confirmed)} published row(s): {_short(exc)}", backend="database"
                ) from exc
            raise

    async def _settle_rows(
        self, confirmed: Sequence[int], failures: Sequence[tuple[_Leased, str]], released: Sequence[_Leased]
    ) -> None:
        ob = DispatchOutbox
        async with self.engine.begin() as conn:
            now = await db_now(conn)
            for start in range(0, len(confirmed), _INSERT_CHUNK):
                await conn.execute(
                    update(ob)
                    .where(ob.id.in_(confirmed[start : start + _INSERT_CHUNK]), ob.status == "pending")
                    .values(status="published", published_at=now, leased_until=None, lease_owner=None, last_error=None)
                )
            retries = [
                {
                    "b_id": row.id,
                    "b_until": now + timedelta(seconds=self._backoff(row.attempts)),
                    "b_error": error[:1000],
                }
                for row, error in failures
            ] + [{"b_id": row.id, "b_until": now, "b_error": None} for row in released]
            if retries:
                await conn.execute(
                    update(_OUTBOX)
                    .where(
                        _OUTBOX.c.id == bindparam("b_id"),
                        _OUTBOX.c.status == "pending",
                        # Only our own lease: if it ran out and another dispatcher took the row, leave it.
                        _OUTBOX.c.lease_owner == self.owner,
                    )
                    .values(
                        leased_until=bindparam("b_until", type_=UTCDateTime()),
                        last_error=bindparam("b_error"),
                        lease_owner=None,
                    ),
                    retries,
                )

    def _backoff(self, attempts: int) -> float:
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, min(attempts - 1, 30))))

    # -- the loop ---------------------------------------------------------------------------------

    async def run_once(self, stop: asyncio.Event | None = None) -> tuple[TickResult, RelayResult]:
        """Dispatch everything due, then relay everything ready (stopping early when ``stop`` is set)."""
        targets = slots = inserted = leased = published = failed = 0
        while stop is None or not stop.is_set():
            tick = await self.tick()
            targets, slots, inserted = targets + tick.targets, slots + tick.slots, inserted + tick.inserted
            if tick.targets < self.batch_size:
                break
        while stop is None or not stop.is_set():
            relay = await self.relay()
            leased, published, failed = leased + relay.leased, published + relay.published, failed + relay.failed
            if relay.leased < self.relay_batch or relay.failed:
                break
        return TickResult(targets, slots, inserted), RelayResult(leased, published, failed)

    async def run(
        self,
        *,
        interval: float = 1.0,
        stop: asyncio.Event | None = None,
        on_cycle: Callable[[TickResult, RelayResult], None] | None = None,
    ) -> None:
        """Run until ``stop`` is set: a cycle every ``interval`` seconds, at once while work is left.
        ``on_cycle`` sees each cycle that did something. ``stop`` is checked between batches, so a
        shutdown waits for one tick transaction or one relay batch at most.

        A database or broker outage is logged and retried with backoff; the loop never dies of it.
        """
        if not interval > 0:
            raise ConfigurationError(f"interval must be > 0 seconds, got {interval!r}")
        stop = stop or asyncio.Event()
        failures = 0
        while not stop.is_set():
            wait = interval
            try:
                tick = await self.tick()
                relay = await self.relay() if not stop.is_set() else RelayResult()
                failures = 0
                if tick.slots or relay.leased:
                    if on_cycle is not None:
                        on_cycle(tick, relay)
                    log.info(
                        "dispatched %d slot(s) of %d target(s); published %d, failed %d",
                        tick.inserted,
                        tick.targets,
                        relay.published,
                        relay.failed,
                    )
                if tick.targets == self.batch_size or (relay.leased == self.relay_batch and not relay.failed):
                    wait = 0.0  # more is due or pending: go on at once
            except BackendUnavailableError as exc:
                failures += 1
                wait = min(self.max_backoff, interval * 2 ** min(failures, 10))
                log.warning("%s; retrying in %.1fs", exc, wait)
            if wait:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _job_message(row: Any, slot: datetime, now: datetime) -> JobMessage:
    """The job message of one claimed target (``row``: its columns, with its website's ``spec``) for
    one slot: the website's :class:`SiteSpec` travels typed. A stored spec that no longer validates
    raises ConfigurationError (the tick sets that target aside)."""
    try:
        site = SiteSpec.model_validate(row.spec)
    except ValidationError as exc:
        raise ConfigurationError(f"website of target {row.id}: stored spec is invalid: {exc}") from None
    return JobMessage.for_slot(
        target_id=row.id,
        slot_at=slot,
        created_at=now,
        website_id=row.website_id,
        site=site,
        search_url=site.search_url(keywords=row.keywords, location=row.location),
        keywords_used=row.keywords,
        location_used=row.location or None,
    )
