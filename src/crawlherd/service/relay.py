"""The relay: outbox rows -> broker, marked published only once the broker confirmed them.

One round (:meth:`Relay.run_round`):

1. :meth:`Relay.lease` -- take up to ``batch`` pending rows whose ``leased_until`` has passed
   (database clock, ``SKIP LOCKED``): ``leased_until = now + lease``, ``lease_owner = us``.
2. :meth:`Relay.publish` -- publish each with its idempotency key, ``concurrency`` at a time, every
   publish bounded by ``publish_timeout`` and the whole round by ``round_timeout``.
3. :meth:`Relay.settle` -- mark the confirmed rows published; a failed row keeps its lease until a
   back-off has passed (doubling per attempt, with its ``last_error``); rows the round did not reach
   are released at once.

The lease is always longer than a round can take (checked at construction), so no other relay takes
a row while its publish may still be confirmed. A relay that dies between publish and mark leaves the
lease to run out; another relay publishes the row again with the same body and key: a duplicate the
workers drop, never a loss.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypedDict, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd import metrics
from crawlherd.brokers.base import Broker
from crawlherd.db.engine import db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import DispatchOutbox, OutboxTrail, UTCDateTime
from crawlherd.errors import ConfigurationError, summarize

__all__ = ["LeasedRow", "Relay", "RelayOptions", "RelayResult"]

log = logging.getLogger(__name__)

_OUTBOX = cast(Table, DispatchOutbox.__table__)
_MARK_CHUNK = 1000  # ids per UPDATE ... WHERE id IN (...) (keeps under the drivers' parameter limits)
_ROUND_ERROR = "relay round deadline passed before the broker confirmed"


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
class LeasedRow:
    """An outbox row this relay holds the lease of."""

    id: int
    key: str
    body: str
    attempts: int
    slot_at: datetime | None = None


class RelayOptions(TypedDict, total=False):
    """The relay's options, as :class:`Relay` and :class:`~crawlherd.service.DispatchService` take them."""

    relay_batch: int
    lease: float
    publish_concurrency: int
    publish_timeout: float
    round_timeout: float | None
    backoff: float
    max_backoff: float
    owner: str | None
    broker_label: str | None


class Relay:
    """Publishes the outbox of ``engine`` to ``broker`` (both the caller's). Options, keyword-only and
    validated here: ``relay_batch`` rows per round; ``lease`` seconds a leased row is ours;
    ``publish_concurrency`` publishes in flight; ``publish_timeout`` per publish; ``round_timeout`` per round
    (default: half the lease; at most 80% of it); ``backoff`` / ``max_backoff``
    for failed publishes; ``owner`` names this relay in ``lease_owner``; ``broker_label`` names the broker
    in the lineage (``outbox_trail.broker``; default: the broker's class; never a URL with secrets)."""

    def __init__(
        self,
        engine: AsyncEngine,
        broker: Broker,
        *,
        relay_batch: int = 500,
        lease: float = 60.0,
        publish_concurrency: int = 32,
        publish_timeout: float = 10.0,
        round_timeout: float | None = None,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        owner: str | None = None,
        broker_label: str | None = None,
    ) -> None:
        for name, value in (("relay_batch", relay_batch), ("publish_concurrency", publish_concurrency)):
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be an integer >= 1, got {value!r}")
        for name, seconds in (("lease", lease), ("publish_timeout", publish_timeout), ("max_backoff", max_backoff)):
            if not seconds > 0:
                raise ConfigurationError(f"{name} must be > 0 seconds, got {seconds!r}")
        if backoff < 0:
            raise ConfigurationError(f"backoff must be >= 0 seconds, got {backoff!r}")
        round_timeout = lease / 2 if round_timeout is None else round_timeout
        if not 0 < round_timeout <= 0.8 * lease:
            raise ConfigurationError(
                f"the relay round deadline ({round_timeout:g}s) must be > 0 and at most 80% of the outbox "
                f"lease ({lease:g}s), so that no other relay takes a row still being published"
            )
        self.engine = engine
        self.broker = broker
        self.batch = relay_batch
        self.lease_time = timedelta(seconds=lease)
        self.concurrency = publish_concurrency
        self.publish_timeout = publish_timeout
        self.round_timeout = round_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.broker_label = (broker_label or type(broker).__name__)[:300]
        #: The last publish failure, while failures go on (None once a publish succeeds again).
        self.last_error: str | None = None

    async def run_round(self) -> RelayResult:
        """Lease up to ``batch`` pending rows, publish them, settle them (see the module docstring)."""
        leased = await self.lease()
        if not leased:
            return RelayResult()
        confirmed: list[int] = []
        failures: list[tuple[LeasedRow, str]] = []
        try:
            await self.publish(leased, confirmed, failures)
        finally:
            # Also on cancellation (shutdown): record what the broker confirmed, release the rest.
            settled = {*confirmed, *(row.id for row, _ in failures)}
            released = [r for r in leased if r.id not in settled]
            await asyncio.shield(self.settle(confirmed, failures, released))
        _observe_lag(leased, confirmed)
        if failures:
            log.warning(
                "%d publish(es) failed, kept in the outbox for a retry; first: %s: %s",
                len(failures),
                failures[0][0].key,
                failures[0][1],
            )
        return RelayResult(leased=len(leased), published=len(confirmed), failed=len(failures))

    async def lease(self) -> list[LeasedRow]:
        """Take the lease of up to ``batch`` pending rows that are ready (oldest first)."""
        ob = DispatchOutbox
        with translate_db_errors("leasing outbox rows"):
            async with self.engine.begin() as conn:
                now = await db_now(conn)
                ids = (
                    select(ob.id)
                    .where(ob.status == "pending", ob.leased_until <= now)
                    .order_by(ob.leased_until, ob.id)
                    .limit(self.batch)
                    .with_for_update(skip_locked=True)
                    .scalar_subquery()
                )
                rows = (
                    await conn.execute(
                        update(ob)
                        .where(ob.id.in_(ids))
                        .values(leased_until=now + self.lease_time, lease_owner=self.owner, attempts=ob.attempts + 1)
                        .returning(ob.id, ob.key, ob.body, ob.attempts, ob.slot_at)
                    )
                ).all()
        return sorted((LeasedRow(r.id, r.key, r.body, r.attempts, r.slot_at) for r in rows), key=lambda r: r.id)

    async def publish(
        self, rows: Sequence[LeasedRow], confirmed: list[int], failures: list[tuple[LeasedRow, str]]
    ) -> None:
        """Publish ``rows``, appending each confirmed id to ``confirmed`` and each failure (with its
        reason) to ``failures`` as it happens. Returns at the round deadline at the latest: what is
        still in flight then counts as failed."""
        semaphore = asyncio.Semaphore(self.concurrency)
        started: dict[int, LeasedRow] = {}
        finished: set[int] = set()

        async def one(row: LeasedRow) -> None:
            async with semaphore:
                started[row.id] = row
                try:
                    await asyncio.wait_for(
                        self.broker.publish(row.body.encode(), key=row.key, headers={"schema_version": "1"}),
                        self.publish_timeout,
                    )
                except Exception as exc:  # noqa: BLE001 - any failure keeps the row for a retry
                    self._failed(row, summarize(exc), failures)
                else:
                    confirmed.append(row.id)
                    self.last_error = None
                    metrics.RELAY_PUBLISHES.labels(outcome="confirmed").inc()
                finished.add(row.id)

        try:
            async with asyncio.timeout(self.round_timeout), asyncio.TaskGroup() as group:
                for row in rows:
                    group.create_task(one(row), name=f"publish:{row.key}")
        except TimeoutError:
            # Publishes cut off in flight may or may not have reached the broker: retried after a
            # back-off (a duplicate at worst). Rows never started are released by the caller.
            for row_id, row in started.items():
                if row_id not in finished:
                    self._failed(row, f"{_ROUND_ERROR} ({self.round_timeout:g}s)", failures)

    def _failed(self, row: LeasedRow, error: str, failures: list[tuple[LeasedRow, str]]) -> None:
        failures.append((row, error))
        metrics.RELAY_PUBLISHES.labels(outcome="failed").inc()
        if self.last_error is None:
            log.warning("publish of %s failed: %s", row.key, error)
        self.last_error = error

    async def settle(
        self, confirmed: Sequence[int], failures: Sequence[tuple[LeasedRow, str]], released: Sequence[LeasedRow]
    ) -> None:
        """Mark ``confirmed`` published; hold each failed row for its back-off; release ``released`` now.
        Only rows still leased by this relay are touched (a lease that ran out belongs to another)."""
        if not (confirmed or failures or released):
            return
        ob = DispatchOutbox
        # On a DB outage the leases run out and the rows are published again: duplicates, never a loss.
        with translate_db_errors(f"marking {len(confirmed)} published row(s)"):
            async with self.engine.begin() as conn:
                now = await db_now(conn)
                for start in range(0, len(confirmed), _MARK_CHUNK):
                    await conn.execute(
                        update(ob)
                        .where(ob.id.in_(confirmed[start : start + _MARK_CHUNK]), ob.status == "pending")
                        .values(
                            status="published", published_at=now, leased_until=None, lease_owner=None, last_error=None
                        )
                    )
                    await conn.execute(
                        update(OutboxTrail)
                        .where(OutboxTrail.outbox_id.in_(confirmed[start : start + _MARK_CHUNK]))
                        .values(published_by=self.owner[:200], broker=self.broker_label)
                    )
                retries = [
                    {
                        "b_id": row.id,
                        "b_until": now + timedelta(seconds=self.backoff_for(row.attempts)),
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
                            _OUTBOX.c.lease_owner == self.owner,
                        )
                        .values(
                            leased_until=bindparam("b_until", type_=UTCDateTime()),
                            last_error=bindparam("b_error"),
                            lease_owner=None,
                        ),
                        retries,
                    )

    def backoff_for(self, attempts: int) -> float:
        """Seconds a row waits after its ``attempts``-th failed publish: doubling, capped."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, min(attempts - 1, 30))))


def _observe_lag(leased: Sequence[LeasedRow], confirmed: Sequence[int]) -> None:
    """Dispatch lag of the confirmed rows: slot time -> now (confirmed and marked)."""
    ok = set(confirmed)
    now = datetime.now(UTC)
    for row in leased:
        if row.id in ok and row.slot_at is not None:
            metrics.DISPATCH_LAG.observe(max(0.0, (now - row.slot_at).total_seconds()))
