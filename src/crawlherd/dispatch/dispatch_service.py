"""The dispatch service: due targets -> outbox (the tick) -> broker (the relay).

:class:`DispatchService` runs the two parts of :mod:`crawlherd.dispatch.outbox` (the **tick**: claim
due targets and write their slots to the outbox, on the database clock) and
:mod:`crawlherd.dispatch.relay` (the **relay**: lease outbox rows, publish them, mark the confirmed
ones) as two independent loops, so that a slow or hung broker never stops scheduling: the tick goes
on claiming slots whatever the broker does, and the outbox holds them until the broker is back.
Any number of services may share one database: exactly one job per (target, slot).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._options import Count, Seconds
from crawlherd._resilience import OutageLog, Retrier, RetryPolicy, Stopped
from crawlherd.brokers.base import Broker
from crawlherd.db.heartbeat import Heartbeat
from crawlherd.dispatch import outbox
from crawlherd.dispatch.gauges import refresh_dispatch_gauges
from crawlherd.dispatch.outbox import LeasedRow, TickResult
from crawlherd.dispatch.relay import Relay, RelayOptions, RelayResult
from crawlherd.dispatch.unstarted import check_interval, republish_unstarted
from crawlherd.errors import BackendUnavailableError, ConfigurationError

__all__ = ["PRUNE_EVERY", "DispatchOptions", "DispatchService", "Handoff", "RelayResult", "TickResult"]

log = logging.getLogger(__name__)

#: Seconds between refreshes of the dispatcher's gauges (targets due, outbox pending).
GAUGES_EVERY = 5.0

#: Seconds between two prunings of the outbox's published rows.
PRUNE_EVERY = 600.0

#: The errors of a step that are an outage to wait out (the config DB's, typed where it is called).
STEP_OUTAGES: tuple[type[BaseException], ...] = (BackendUnavailableError,)

#: Called with what one tick or one relay round did (the other part is empty).
ProgressFn = Callable[[TickResult, RelayResult], None]


@dataclass(frozen=True, kw_only=True)
class DispatchOptions(RelayOptions):
    """The dispatch service's options: the relay's (:class:`~crawlherd.dispatch.relay.RelayOptions`) and
    the tick's: ``batch_size`` targets claimed per tick transaction; ``max_slots_per_target`` slots one
    target may emit in one tick; ``tick_rounds`` ticks under way at once (2: while one waits for the
    database, the other plans its batch; they claim disjoint targets, ``SKIP LOCKED``, as two
    dispatchers do); ``relay_rounds`` relay rounds under way at once (2: while one waits for
    the broker's confirms, the other leases and marks rows in the database); ``outbox_retention``
    seconds a published outbox row is kept (then pruned, every ``PRUNE_EVERY`` seconds);
    ``republish_after`` seconds after which a published job that never started, while the broker holds
    nothing, is published again (:mod:`crawlherd.dispatch.unstarted`; None: never);
    ``heartbeat_interval`` seconds between the process's heartbeats (None: no heartbeat)."""

    batch_size: Count = 5000
    max_slots_per_target: Count = 1000
    tick_rounds: Count = 2
    relay_rounds: Count = 2
    outbox_retention: Seconds = 7 * 86400.0
    republish_after: Seconds | None = 300.0
    heartbeat_interval: Seconds | None = 10.0


class DispatchService:
    """Turns due scrape targets into job messages on ``broker``, exactly once per (target, slot), with
    ``options`` (:class:`DispatchOptions`). ``engine`` and ``broker`` are owned by the caller;
    ``outages``: the process's outage log when it has one already (``crawlherd run`` shares the
    worker's, so that one outage is said once)."""

    def __init__(
        self,
        engine: AsyncEngine,
        broker: Broker,
        options: DispatchOptions | None = None,
        *,
        outages: OutageLog | None = None,
    ) -> None:
        self.options = options = options or DispatchOptions()
        self.engine = engine
        self.broker = broker
        self.outbox_retention = timedelta(seconds=options.outbox_retention)
        self.relayer = Relay(engine, broker, options, outages=outages)
        self.owner = self.relayer.owner
        #: The outages under way ("config DB", "broker"), each said once when it starts and once when it ends.
        self.outages = self.relayer.outages

    async def tick(self, handoff: Handoff | None = None) -> TickResult:
        """One tick: claim up to ``batch_size`` due targets and write their slots to the outbox. With
        ``handoff`` and room in it, the rows are written leased to this service's relay and queued
        there (:meth:`relay` publishes them without leasing them again)."""
        lease = handoff is not None and handoff.has_room()
        leased_at = asyncio.get_running_loop().time()
        result = await outbox.tick(
            self.engine,
            batch_size=self.options.batch_size,
            max_slots_per_target=self.options.max_slots_per_target,
            owner=self.owner,
            lease_for=self.relayer.lease_time if lease else None,
            lease_max=self.options.relay_batch,
        )
        if handoff is not None and result.leased:
            handoff.put(leased_at, result.leased)
        return result

    async def relay(self, handoff: Handoff | None = None) -> RelayResult:
        """One relay round: the rows the tick handed over (``handoff``) if any, else lease up to
        ``relay_batch`` pending rows; publish, mark the confirmed."""
        if handoff is not None and (handed := handoff.take()) is not None:
            leased_at, rows = handed
            return await self.relayer.run_round(rows, leased_at=leased_at)
        return await self.relayer.run_round()

    async def republish_unstarted(self) -> int:
        """Put the jobs the broker forgot back to be published (:mod:`crawlherd.dispatch.unstarted`);
        how many. Nothing when ``republish_after`` is None."""
        if self.options.republish_after is None:
            return 0
        after = timedelta(seconds=self.options.republish_after)
        return await republish_unstarted(self.engine, self.broker, after=after)

    async def run_once(self, stop: asyncio.Event | None = None) -> tuple[TickResult, RelayResult]:
        """Tick until nothing is due and relay until nothing is ready to publish (stopping early when
        ``stop`` is set): one dispatch cycle, for cron, timers and serverless functions. The relay
        runs beside the ticks, from the first committed batch on (the broker's round trips overlap the
        database's); it stops at its first failed publish (the rows wait for their back-off)."""
        stop = stop or asyncio.Event()
        ticked, relayed = TickResult(), RelayResult()
        new_rows, ticks_done = asyncio.Event(), asyncio.Event()
        handoff = Handoff(self.options.relay_rounds)
        # Whether a relay round should lease: at first (rows left pending before), whenever a tick wrote
        # rows it could not hand over, and at the end -- not while every row comes handed over (a lease
        # then finds nothing: a transaction for nothing).
        unleased = True
        ticking = self.options.tick_rounds

        async def ticks() -> None:
            nonlocal ticked, unleased, ticking
            try:
                while not stop.is_set():
                    tick = await self.tick(handoff)
                    ticked += tick
                    if tick.inserted > len(tick.leased):
                        unleased = True
                    if tick.slots:
                        new_rows.set()
                    if tick.targets < self.options.batch_size:
                        break
            finally:
                ticking -= 1
                if not ticking:
                    ticks_done.set()

        async def relays() -> None:
            nonlocal relayed, unleased
            while not stop.is_set():
                # no row can come after this round's lease (nor be handed over)
                last_chance = ticks_done.is_set() and not handoff
                new_rows.clear()
                relay = RelayResult()
                if handoff:
                    relay = await self.relay(handoff)
                elif unleased or last_chance:
                    unleased = False
                    relay = await self.relay()
                    # a full batch: more may be pending
                    unleased = unleased or relay.leased >= self.options.relay_batch
                relayed += relay
                if relay.failed:
                    break
                if handoff:
                    continue
                if relay.leased < self.options.relay_batch:
                    if last_chance:
                        break
                    waits = [asyncio.ensure_future(e.wait()) for e in (new_rows, ticks_done, stop)]
                    try:
                        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for w in waits:
                            w.cancel()

        try:
            async with asyncio.TaskGroup() as group:
                for n in range(self.options.tick_rounds):
                    group.create_task(ticks(), name=f"dispatch-once-tick-{n}")
                for n in range(self.options.relay_rounds):
                    group.create_task(relays(), name=f"dispatch-once-relay-{n}")
        except BaseExceptionGroup as group_error:  # the first failure as itself (an outage: BackendUnavailableError)
            raise group_error.exceptions[0] from None
        finally:
            await handoff.release(self.relayer)
        return ticked, relayed

    async def run(
        self, *, interval: float = 1.0, stop: asyncio.Event | None = None, on_cycle: ProgressFn | None = None
    ) -> None:
        """Run ``tick_rounds`` tick loops and ``relay_rounds`` relay loops until ``stop`` is set: each works every
        ``interval`` seconds, at once while work is left, and the relay also as soon as a tick wrote new rows.
        ``on_cycle`` sees each tick and each relay round that did something. A database or broker
        outage is retried with back-off and said once (:attr:`outages`: a warning when it starts, an
        info line when it ends); neither loop dies of it, nor waits for the other.
        """
        if not interval > 0:
            raise ConfigurationError(f"interval must be > 0 seconds, got {interval!r}")
        stop = stop or asyncio.Event()
        # A failed step is retried with back-off from ``interval`` up to ``max_backoff``.
        retrier = Retrier(
            self.outages,
            temporary=STEP_OUTAGES,
            policy=RetryPolicy(base=min(interval, self.options.max_backoff), cap=self.options.max_backoff),
        )
        new_rows = asyncio.Event()
        handoff = Handoff(self.options.relay_rounds)

        gauges_at = 0.0

        async def tick() -> bool:
            nonlocal gauges_at
            result = await self.tick(handoff)
            if time.monotonic() - gauges_at >= GAUGES_EVERY:
                gauges_at = time.monotonic()
                await refresh_dispatch_gauges(self.engine)
            if result.slots:
                new_rows.set()
                log.info("dispatched %d slot(s) of %d target(s)", result.inserted, result.targets)
                if on_cycle is not None:
                    on_cycle(result, RelayResult())
            return result.targets == self.options.batch_size

        async def relay() -> bool:
            new_rows.clear()
            result = await self.relay(handoff)
            if result.leased:
                log.info("published %d job(s), %d failed", result.published, result.failed)
                if on_cycle is not None:
                    on_cycle(TickResult(), result)
            return (result.leased == self.options.relay_batch or bool(handoff)) and not result.failed

        async def prune() -> bool:
            pruned = await self.relayer.prune(self.outbox_retention)
            if pruned:
                log.info("pruned %d published outbox row(s) older than %s", pruned, self.outbox_retention)
            return False

        async def republish() -> bool:
            await self.republish_unstarted()
            return False

        try:
            async with asyncio.TaskGroup() as group:
                if self.options.heartbeat_interval is not None:
                    beat = Heartbeat(self.engine, kind="dispatcher", name=self.owner,
                                     interval=self.options.heartbeat_interval, outages=self.outages)
                    group.create_task(beat.run(stop), name="dispatch-heartbeat")
                for n in range(self.options.tick_rounds):
                    group.create_task(self._repeat(tick, interval, stop, retrier), name=f"dispatch-tick-{n}")
                for n in range(self.options.relay_rounds):
                    group.create_task(self._repeat(relay, interval, stop, retrier, wake=new_rows),
                                      name=f"dispatch-relay-{n}")
                group.create_task(self._repeat(prune, PRUNE_EVERY, stop, retrier), name="dispatch-prune")
                if self.options.republish_after is not None:
                    every = check_interval(self.options.republish_after)
                    group.create_task(self._repeat(republish, every, stop, retrier), name="dispatch-republish")
        finally:
            await handoff.release(self.relayer)

    async def _repeat(
        self,
        step: Callable[[], Awaitable[bool]],
        interval: float,
        stop: asyncio.Event,
        retrier: Retrier,
        wake: asyncio.Event | None = None,
    ) -> None:
        """Run ``step`` until ``stop``: again at once when it says more is left, else after ``interval``
        (or when ``wake`` is set). A temporary error (``retrier.temporary``: an outage) is said once and
        waited out with ``retrier``'s back-off; any other error is a bug and ends the service."""
        attempts = retrier.attempts("database", stop=stop)
        while not stop.is_set():
            try:
                more = await step()
            except retrier.temporary as exc:
                try:
                    await attempts.failed(exc)
                except Stopped:
                    return
                continue
            attempts.succeeded()
            await _pause(stop, 0.0 if more else interval, wake)


class Handoff:
    """Rows a tick wrote already leased to this service's relay, waiting for a relay round: at most
    ``size`` batches (one per relay round), so that rows are handed over only while the relay keeps
    up -- otherwise the tick writes them unleased and any relay leases them (a hung broker never holds
    up scheduling, nor rows for longer than their lease)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._batches: collections.deque[tuple[float, tuple[LeasedRow, ...]]] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._batches)

    def has_room(self) -> bool:
        return len(self._batches) < self.size

    def put(self, leased_at: float, rows: tuple[LeasedRow, ...]) -> None:
        self._batches.append((leased_at, rows))

    def take(self) -> tuple[float, tuple[LeasedRow, ...]] | None:
        return self._batches.popleft() if self._batches else None

    async def release(self, relay: Relay) -> None:
        """Give the rows no round took back to the outbox at once (shutdown, or a failure ended the
        rounds); a database outage leaves them to their lease."""
        while (handed := self.take()) is not None:
            try:
                await relay.settle([], [], handed[1])
            except BackendUnavailableError as exc:
                log.warning("%d handed-over row(s) wait for their lease to run out: %s", len(handed[1]), exc)


async def _pause(stop: asyncio.Event, seconds: float, wake: asyncio.Event | None = None) -> None:
    """Sleep ``seconds``, or less when ``stop`` (or ``wake``) is set."""
    if seconds <= 0 or stop.is_set():
        await asyncio.sleep(0)
        return
    waits = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waits.append(asyncio.ensure_future(wake.wait()))
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
