"""The relay: outbox rows -> broker, marked published only once the broker confirmed them.

One round (:meth:`Relay.run_round`):

1. :meth:`Relay.lease` -- take up to ``batch`` pending rows whose ``leased_until`` has passed
   (database clock, ``SKIP LOCKED``): ``leased_until = now + lease``, ``lease_owner = us``. Or none:
   the rows the tick wrote already leased to us (``run_round(leased)``, handed over by
   :class:`~crawlherd.dispatch.dispatch_service.DispatchService`).
2. :meth:`Relay.publish` -- publish each with its idempotency key, ``publish_concurrency`` (500)
   confirms outstanding at a time (RabbitMQ: one confirm channel, many unconfirmed publishes), or, for
   a broker that publishes batches (:class:`BatchPublisher`: Redis pipelines its ``XADD`` s), in
   batches of ``publish_concurrency``; every batch bounded by ``publish_timeout``, every single
   publish by ``publish_timeout`` *without any confirm* (a stall: while confirms keep coming, a
   publish queued behind hundreds of others is waited for -- timing it out would publish again what
   the broker kept), and the whole round by ``round_timeout``; no publish starts in the round's last
   ``publish_timeout`` (the rows are released for the next round).
3. :meth:`Relay.settle` -- mark the confirmed rows published in one ``UPDATE`` (PostgreSQL: ``id =
   ANY(array)``); a failed row keeps its lease until a
   back-off has passed (doubling per attempt, with its ``last_error``); a row the broker refused
   (:class:`~crawlherd.errors.MessageRejectedError`: unroutable, nacked) on its ``dead_after``-th
   attempt or later goes ``dead`` with the reason (listed with the dead jobs); rows the round did not
   reach are released at once.

Published rows are kept ``retention`` and then deleted by :meth:`Relay.prune` (the service runs it
every few minutes): the outbox stays bounded. An outage never kills a row: only refusals count. A
broker outage (publishes failing or timing out, not refused) is said once, when it starts, and once
when a publish is confirmed again (:attr:`Relay.outages`, shared with the dispatch service's steps);
a refusal is a warning each time.

The lease is always longer than a round can take (checked at construction), so no other relay takes
a row while its publish may still be confirmed. A relay that dies between publish and mark leaves the
lease to run out; another relay publishes the row again with the same body and key: a duplicate the
workers drop, never a loss. A relay stopped (cancelled) mid-round does the same with the rows whose
publish it cut off in flight, and releases at once only the rows it never sent.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, cast, runtime_checkable

from sqlalchemy import BigInteger, Table, bindparam, delete, func, select, text, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd import metrics
from crawlherd._aio import wait_while_progressing
from crawlherd._options import Count, Delay, Seconds, check_options
from crawlherd._resilience import OutageLog, backoff_delay
from crawlherd.brokers.base import Broker
from crawlherd.db.dialect import sql_capabilities
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import DispatchOutbox, OutboxTrail, UTCDateTime
from crawlherd.dispatch.outbox import LeasedRow, custom_plans
from crawlherd.errors import BackendUnavailableError, ConfigurationError, MessageRejectedError, summarize
from crawlherd.messages import SCHEMA_VERSION

__all__ = ["JOB_HEADERS", "BatchPublisher", "Failure", "LeasedRow", "Relay", "RelayOptions", "RelayResult"]

log = logging.getLogger(__name__)

_OUTBOX = cast(Table, DispatchOutbox.__table__)
# The partial indexes' own terms, inline: a bound 'pending' would hide them from SQLite's planner and
# from PostgreSQL's generic plans of prepared statements.
_PENDING = text("dispatch_outbox.status = 'pending'")
_PUBLISHED = text("dispatch_outbox.status = 'published'")
_MARK_CHUNK = 1000  # ids per UPDATE ... WHERE id IN (...) (keeps under the drivers' parameter limits)
_ROUND_ERROR = "relay round deadline passed before the broker confirmed"
#: The publish errors that are a broker outage: said once (:attr:`Relay.outages`), the row published
#: again after its back-off, never counted towards ``dead_after`` -- the broker's typed outage, and a
#: publish that timed out or stalled. A refusal (:class:`~crawlherd.errors.MessageRejectedError`) is
#: the broker's answer, not an outage; any other error is a bug, logged as one (the row is kept).
PUBLISH_OUTAGES: tuple[type[BaseException], ...] = (BackendUnavailableError, TimeoutError)
#: The headers every job message is published with.
JOB_HEADERS: Mapping[str, str] = {"schema_version": str(SCHEMA_VERSION)}


@runtime_checkable
class BatchPublisher(Protocol):
    """A broker that publishes many messages in one round trip (``RedisBroker``: pipelined ``XADD``)."""

    async def publish_many(
        self, messages: Sequence[tuple[bytes, str, Mapping[str, str] | None]]
    ) -> list[Exception | None]:
        """Publish each ``(body, key, headers)``; per message, in order, None (confirmed) or its error.
        Raises (for the whole batch) when the broker cannot be reached."""
        ...


@dataclass(frozen=True, slots=True)
class RelayResult:
    """One relay round (or several, summed): rows leased, published (confirmed and marked), failed
    (kept for a retry after a back-off)."""

    leased: int = 0
    published: int = 0
    failed: int = 0

    def __add__(self, other: RelayResult) -> RelayResult:
        return RelayResult(self.leased + other.leased, self.published + other.published, self.failed + other.failed)


@dataclass(frozen=True, slots=True)
class Failure:
    """A publish that failed: the row, the reason, whether the broker refused it (a refusal counts
    towards ``dead_after``; an outage or a timeout never does) and whether it is an outage (one of
    :data:`PUBLISH_OUTAGES`, or the round's deadline)."""

    row: LeasedRow
    error: str
    rejected: bool = False
    outage: bool = True


@dataclass(slots=True)
class _Publishes:
    """The publishes of one round as they settle: which rows started, which finished, and how."""

    relay: Relay
    last_start: float  # the loop time after which no publish starts (Relay._last_start)
    confirmed: list[int]
    failures: list[Failure]
    started: dict[int, LeasedRow] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)

    def too_late(self) -> bool:
        return asyncio.get_running_loop().time() > self.last_start

    def unfinished(self) -> list[LeasedRow]:
        """The rows whose publish started and has not ended."""
        return [row for row_id, row in self.started.items() if row_id not in self.finished]

    def settled(self, row: LeasedRow, error: BaseException | None) -> None:
        """``row``'s publish is over: confirmed (``error`` None) or failed."""
        if error is None:
            self.confirmed.append(row.id)
            self.relay.confirmed_now()
        else:
            failure = Failure(row, summarize(error), rejected=isinstance(error, MessageRejectedError),
                              outage=isinstance(error, PUBLISH_OUTAGES))
            self.relay._failed(failure, self.failures)
        self.finished.add(row.id)


@dataclass(frozen=True, kw_only=True)
class RelayOptions:
    """The relay's options (:class:`Relay`; ``DispatchOptions`` adds the tick's).

    ``relay_batch`` rows per round; ``lease`` seconds a leased row is ours; ``publish_concurrency``
    publishes in flight; ``publish_timeout`` per publish; ``round_timeout`` per round (default: half the
    lease; at most 80% of it); ``backoff`` / ``max_backoff`` for failed publishes; ``dead_after``
    attempts before a refused row is dead; ``owner`` names this relay in ``lease_owner`` (default: host,
    pid and a random part); ``broker_label`` names the broker in the lineage (default: its class)."""

    relay_batch: Count = 5000
    lease: Seconds = 60.0
    publish_concurrency: Count = 500
    publish_timeout: Seconds = 10.0
    round_timeout: Seconds | None = None
    backoff: Delay = 1.0
    max_backoff: Seconds = 300.0
    dead_after: Count = 5
    owner: str | None = None
    broker_label: str | None = None

    def __post_init__(self) -> None:
        check_options(self, type(self).__name__)
        if self.round_timeout is not None and self.round_timeout > 0.8 * self.lease:
            raise ConfigurationError(
                f"the relay round deadline ({self.round_timeout:g}s) must be at most 80% of the outbox "
                f"lease ({self.lease:g}s), so that no other relay takes a row still being published"
            )


class Relay:
    """Publishes the outbox of ``engine`` to ``broker`` (both the caller's), with ``options``
    (:class:`RelayOptions`); ``outages``: the process's outage log, if it has one already (else its own)."""

    def __init__(
        self,
        engine: AsyncEngine,
        broker: Broker,
        options: RelayOptions | None = None,
        *,
        outages: OutageLog | None = None,
    ) -> None:
        self.options = options = options or RelayOptions()
        self.engine = engine
        self.broker = broker
        #: What the config DB's SQL can do (its flags, computed once for the engine).
        self.sql = sql_capabilities(engine)
        self.lease_time = timedelta(seconds=options.lease)
        self.round_timeout = options.lease / 2 if options.round_timeout is None else options.round_timeout
        self.owner = options.owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.broker_label = (options.broker_label or type(broker).__name__)[:300]
        self._confirmed_at = -math.inf  # monotonic time of the last confirmed publish
        #: The last publish failure, while failures go on (None once a publish succeeds again).
        self.last_error: str | None = None
        #: Which services are down ("broker" here; the dispatch service adds "config DB").
        self.outages = outages or OutageLog(log, f"dispatcher {self.owner}")

    async def run_round(
        self, leased: Sequence[LeasedRow] | None = None, *, leased_at: float | None = None
    ) -> RelayResult:
        """Lease up to ``batch`` pending rows, publish them, settle them (see the module docstring).
        ``leased``: rows already leased to this relay (by the tick, :func:`~crawlherd.dispatch.outbox.tick`
        with ``lease_for``), published instead; ``leased_at``: the event loop's time (``loop.time()``)
        when their lease began at the latest -- the round deadline counts from there."""
        if leased is None:
            leased_at = asyncio.get_running_loop().time()
            leased = await self.lease()
        if not leased:
            return RelayResult()
        confirmed: list[int] = []
        failures: list[Failure] = []
        in_flight: list[LeasedRow] = []
        try:
            await self.publish(leased, confirmed, failures, leased_at=leased_at, in_flight=in_flight)
        finally:
            # Also on cancellation (shutdown): record what the broker confirmed, release what was never
            # sent; a publish cut off in flight may have reached the broker: its row keeps the lease, and
            # is published again only once that runs out (as after a crash), not by another relay at once.
            settled = {*confirmed, *(f.row.id for f in failures), *(r.id for r in in_flight)}
            released = [r for r in leased if r.id not in settled]
            await asyncio.shield(self.settle(confirmed, failures, released))
        metrics.RELAY_PUBLISHES.labels(outcome="confirmed").inc(len(confirmed))
        _observe_lag(leased, confirmed)
        if confirmed:
            self.outages.up("broker")
        _log_failures(failures)
        return RelayResult(leased=len(leased), published=len(confirmed), failed=len(failures))

    async def lease(self) -> list[LeasedRow]:
        """Take the lease of up to ``batch`` pending rows that are ready (oldest first)."""
        ob = DispatchOutbox
        with translate_db_errors("leasing outbox rows"):
            async with self.engine.begin() as conn:
                now = await custom_plans(conn)
                picked = (
                    select(ob.id)
                    .where(_PENDING, ob.leased_until <= now)
                    .order_by(ob.leased_until, ob.id)
                    .limit(self.options.relay_batch)
                    .with_for_update(skip_locked=True)
                )
                lease = update(ob).values(
                    leased_until=now + self.lease_time, lease_owner=self.owner, attempts=ob.attempts + 1
                )
                if self.sql.skip_locked:
                    # The locking SELECT as a CTE runs exactly once. As an IN (subquery) the planner
                    # may run it again (a generic plan re-scanning it), and the UPDATE then takes rows
                    # it never locked -- rows another relay leased at the same moment.
                    cte = picked.cte("picked")
                    lease = lease.where(ob.id == cte.c.id)
                else:  # SQLite: one writer at a time (BEGIN IMMEDIATE)
                    lease = lease.where(ob.id.in_(picked.scalar_subquery()))
                rows = (await conn.execute(lease.returning(ob.id, ob.key, ob.body, ob.attempts, ob.slot_at))).all()
        return sorted((LeasedRow(r.id, r.key, r.body, r.attempts, r.slot_at) for r in rows), key=lambda r: r.id)

    async def publish(
        self,
        rows: Sequence[LeasedRow],
        confirmed: list[int],
        failures: list[Failure],
        *,
        leased_at: float | None = None,
        in_flight: list[LeasedRow] | None = None,
    ) -> None:
        """Publish ``rows``, appending each confirmed id to ``confirmed`` and each failure (with its
        reason) to ``failures`` as it happens. Returns at the round deadline (``round_timeout`` after
        ``leased_at``, the loop's time when the lease began; default: now) at the latest: what is
        still in flight then counts as failed; nothing is started after it (a broker that never
        makes the loop wait could otherwise publish past it). Cancelled, it appends the rows whose
        publish was cut off in flight to ``in_flight``."""
        loop = asyncio.get_running_loop()
        deadline = (loop.time() if leased_at is None else leased_at) + self.round_timeout
        publishes = _Publishes(self, self._last_start(deadline), confirmed, failures)
        try:
            async with asyncio.timeout_at(deadline):
                if isinstance(self.broker, BatchPublisher):
                    await self._publish_batches(self.broker, rows, publishes)
                else:
                    await self._publish_each(rows, publishes)
        except TimeoutError:
            # Publishes cut off in flight may or may not have reached the broker: retried after a
            # back-off (a duplicate at worst). Rows never started are released by the caller.
            for row in publishes.unfinished():
                self._failed(Failure(row, f"{_ROUND_ERROR} ({self.round_timeout:g}s)"), failures)
        except asyncio.CancelledError:
            if in_flight is not None:
                in_flight.extend(publishes.unfinished())
            raise

    async def _publish_each(self, rows: Sequence[LeasedRow], publishes: _Publishes) -> None:
        """``publish_concurrency`` publishers, each taking the next row as soon as its last is confirmed."""
        todo = iter(rows)

        async def publisher() -> None:
            for row in todo:
                if publishes.too_late():
                    return  # too late in the round to be confirmed before its deadline: released
                publishes.started[row.id] = row
                try:
                    await wait_while_progressing(
                        self.broker.publish(row.body.encode(), key=row.key, headers=JOB_HEADERS),
                        self.options.publish_timeout,
                        self.last_confirmed,
                    )
                except Exception as exc:  # noqa: BLE001 - any failure keeps the row for a retry
                    publishes.settled(row, exc)
                else:
                    publishes.settled(row, None)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self.options.publish_concurrency, len(rows))):
                group.create_task(publisher())

    async def _publish_batches(self, broker: BatchPublisher, rows: Sequence[LeasedRow], publishes: _Publishes) -> None:
        """Batches of ``publish_concurrency`` rows, one after the other (each one round trip)."""
        for start in range(0, len(rows), self.options.publish_concurrency):
            if publishes.too_late():
                return  # too late in the round: the rest is released by the caller
            batch = rows[start : start + self.options.publish_concurrency]
            publishes.started.update((row.id, row) for row in batch)
            errors: Sequence[BaseException | None]
            try:
                async with asyncio.timeout(self.options.publish_timeout):
                    errors = await broker.publish_many([(row.body.encode(), row.key, JOB_HEADERS) for row in batch])
            except Exception as exc:  # noqa: BLE001 - any failure keeps the rows for a retry
                errors = [exc] * len(batch)
            for row, error in zip(batch, errors, strict=True):
                publishes.settled(row, error)

    def _last_start(self, deadline: float) -> float:
        """The loop time after which this round starts no publish: ``publish_timeout`` before its
        ``deadline`` (but at most half a round before it), so that what it starts can be confirmed in
        time -- a publish cut off by the deadline may be published again, a duplicate; a row not
        started is released, and published by the next round."""
        return deadline - min(self.round_timeout / 2, self.options.publish_timeout)

    def last_confirmed(self) -> float:
        """The monotonic time of the last confirmed publish (-inf before the first)."""
        return self._confirmed_at

    def confirmed_now(self) -> None:
        """A publish was confirmed: the broker answers (no error under way)."""
        self._confirmed_at = time.monotonic()
        self.last_error = None

    def _failed(self, failure: Failure, failures: list[Failure]) -> None:
        failures.append(failure)
        metrics.RELAY_PUBLISHES.labels(outcome="failed").inc()
        if failure.outage:  # said once, when it starts
            self.outages.down("broker", failure.error)
        self.last_error = failure.error

    async def settle(
        self, confirmed: Sequence[int], failures: Sequence[Failure], released: Sequence[LeasedRow]
    ) -> None:
        """Mark ``confirmed`` published; hold each failed row for its back-off; release ``released`` now.
        Only rows still leased by this relay are touched (a lease that ran out belongs to another)."""
        if not (confirmed or failures or released):
            return
        ob = DispatchOutbox
        # On a DB outage the leases run out and the rows are published again: duplicates, never a loss.
        with translate_db_errors(f"marking {len(confirmed)} published row(s)"):
            async with self.engine.begin() as conn:
                now = await custom_plans(conn)
                mark = update(ob).values(
                    status="published", published_at=now, leased_until=None, lease_owner=None, last_error=None
                )
                trail = update(OutboxTrail).values(published_by=self.owner[:200], broker=self.broker_label)
                if confirmed and self.sql.array_params:  # one statement, one array
                    ids = bindparam("ids", list(confirmed), type_=postgresql.ARRAY(BigInteger))
                    marked = mark.where(ob.id == func.any(ids), ob.status == "pending").returning(ob.id).cte("marked")
                    await conn.execute(trail.where(OutboxTrail.outbox_id == marked.c.id))
                else:
                    for start in range(0, len(confirmed), _MARK_CHUNK):
                        chunk = confirmed[start : start + _MARK_CHUNK]
                        await conn.execute(mark.where(ob.id.in_(chunk), ob.status == "pending"))
                        await conn.execute(trail.where(OutboxTrail.outbox_id.in_(chunk)))
                # The pending row ``b_id`` if its lease is still ours (one that ran out belongs to another).
                row = _OUTBOX.c
                ours = update(_OUTBOX).where(
                    row.id == bindparam("b_id"), row.status == "pending", row.lease_owner == self.owner
                )
                dead = [f for f in failures if f.rejected and f.row.attempts >= self.options.dead_after]
                if dead:
                    await conn.execute(
                        ours.values(
                            status="dead", leased_until=None, lease_owner=None, last_error=bindparam("b_error")
                        ),
                        [{"b_id": f.row.id, "b_error": f.error[:1000]} for f in dead],
                    )
                    for f in dead:
                        log.error("outbox row %s is dead after %d refused attempt(s): %s", f.row.key, f.row.attempts,
                                  f.error)
                retries = [
                    {
                        "b_id": f.row.id,
                        "b_until": now + timedelta(seconds=self.backoff_for(f.row.attempts)),
                        "b_error": f.error[:1000],
                    }
                    for f in failures
                    if not (f.rejected and f.row.attempts >= self.options.dead_after)
                ] + [{"b_id": row.id, "b_until": now, "b_error": None} for row in released]
                if retries:
                    await conn.execute(
                        ours.values(
                            leased_until=bindparam("b_until", type_=UTCDateTime()),
                            last_error=bindparam("b_error"),
                            lease_owner=None,
                        ),
                        retries,
                    )

    async def prune(self, retention: timedelta, *, chunk: int = 5000) -> int:
        """Delete rows published more than ``retention`` ago (in chunks, so no lock is held long);
        how many. Their jobs are recorded in ``job_runs``; the slot cannot come back (the tick only
        moves forward), so the unique key is not needed for them any more."""
        ob = DispatchOutbox
        deleted = 0
        with translate_db_errors("pruning the outbox"):
            while True:
                async with self.engine.begin() as conn:
                    cutoff = await custom_plans(conn) - retention
                    ids = (
                        select(ob.id)
                        .where(_PUBLISHED, ob.published_at < cutoff)
                        .limit(chunk)
                        .scalar_subquery()
                    )
                    count = (await conn.execute(delete(ob).where(ob.id.in_(ids)))).rowcount
                deleted += count
                if count < chunk:
                    return deleted

    def backoff_for(self, attempts: int) -> float:
        """Seconds a row waits after its ``attempts``-th failed publish: :func:`~crawlherd._resilience.
        backoff_delay` from ``backoff`` up to ``max_backoff``, without jitter -- the row's retry time is
        its own (recorded in ``leased_until``, shown by the console) and relays lease rows in batches,
        so spreading rows that failed together would only make more, smaller rounds."""
        return backoff_delay(attempts, base=self.options.backoff, cap=self.options.max_backoff, jitter=0.0)


def _log_failures(failures: Sequence[Failure]) -> None:
    """One line per kind of failure of a round: refusals (a warning), bugs (an error), outages (debug:
    the outage itself is said once by the outage log)."""
    refused = [f for f in failures if f.rejected]
    if refused:
        log.warning(
            "%d publish(es) refused by the broker, kept in the outbox for a retry; first: %s: %s",
            len(refused),
            refused[0].row.key,
            refused[0].error,
        )
    broken = [f for f in failures if not (f.rejected or f.outage)]
    if broken:
        log.error("%d publish(es) failed with an unexpected error, kept in the outbox for a retry; first: %s: %s",
                  len(broken), broken[0].row.key, broken[0].error)
    if len(failures) > len(refused) + len(broken):
        log.debug("%d publish(es) failed (broker unavailable), kept in the outbox",
                  len(failures) - len(refused) - len(broken))


def _observe_lag(leased: Sequence[LeasedRow], confirmed: Sequence[int]) -> None:
    """Dispatch lag of the confirmed rows: slot time -> now (confirmed and marked)."""
    ok = set(confirmed)
    now = datetime.now(UTC)
    for row in leased:
        if row.id in ok and row.slot_at is not None:
            metrics.DISPATCH_LAG.observe(max(0.0, (now - row.slot_at).total_seconds()))
