"""The worker's lifecycle: consumes job messages and crawls them through its page pipeline.

For each delivery: decode and validate the message (an invalid one is dead-lettered with the
reason) -> record the run as ``running`` -- or skip it when its run already succeeded (idempotency:
the same target and slot; the check and the start are one statement) -> queue the job's first
listing page in the worker's frontier -> wait for the listing chain's outcome and for the detail
pages it queued to be settled (:mod:`crawlherd.worker.completion`) -> record ``succeeded`` -> ack.

This module is the lifecycle -- deliveries, the claims on them, outages; every page, listing or
detail, of any job, goes through the worker's page pipeline (:mod:`crawlherd.worker.pages`: its one
frontier and one page loop, the website's politeness, robots.txt, storing items).

A job that fails is published again with ``attempt_count + 1`` after an exponential back-off; after
``max_attempts`` it is ``dead`` (in ``job_runs`` and in the broker's dead-letter store).

Shutdown (``stop`` set, SIGTERM, Ctrl+C): no new deliveries are taken; jobs in flight get
``shutdown_timeout`` seconds to finish; the rest are cancelled and their deliveries given back to the
queue at once (another worker takes them in seconds), so a restart loses no job.

A job whose website this worker's own settings refuse (a private or loopback address without
``--allow-private``) is given back to the queue after a back-off without spending an attempt, and
said once per website (:mod:`crawlherd.worker.refusals`): no retry here could cure it.

Poison messages: a body that is not a valid job (:func:`~crawlherd.messages.decode_job`: too large,
not UTF-8, too deep, wrong types) is dead-lettered at once with the reason; a job for a target that no
longer exists too. A job whose handling fails with an unexpected error (a bug) counts as an attempt:
retried after a back-off, dead after ``max_attempts``. A message that kills its worker outright is
bounded by the broker's ``max_deliveries``. Nothing is ever requeued for immediate redelivery, except
the deliveries given back at shutdown.

Outages: when the broker, the frontier or the config DB stops answering, the worker says so once (a
warning), keeps trying with back-off (a job it could not record goes back to the broker with a delay,
not counted as an attempt), and says once when it is back (an info line). What failed is the typed
error's ``role`` (:class:`~crawlherd.errors.BackendUnavailableError`); the retrying is the resilience
kernel's (:class:`~crawlherd._resilience.Retrier`, one :class:`~crawlherd._resilience.OutageLog` per
worker, shared with its heartbeat and its page loop).

Long jobs: while it works on a job, the worker extends its claim on the delivery every third of the
broker's ``lease`` (:meth:`~crawlherd.brokers.base.Broker.touch`), so a job longer than the lease is
not handed to a second worker; a worker that dies stops extending, and its job is delivered again
after about one lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd import metrics
from crawlherd._aio import AsyncClosing
from crawlherd._resilience import OutageLog, Retrier, Stopped, backoff_delay, role_of, service_name
from crawlherd.brokers.base import Broker, Delivery
from crawlherd.crawler import Crawler
from crawlherd.db.heartbeat import Heartbeat
from crawlherd.errors import (
    BackendUnavailableError,
    BrokerError,
    CrawlherdError,
    MessageError,
    PermanentJobError,
    summarize,
)
from crawlherd.fetch.base import FetchLimits
from crawlherd.frontier import Frontier
from crawlherd.messages import JobMessage, decode_job, encode_job
from crawlherd.sinks import Sink, SQLSink
from crawlherd.worker.completion import JobCompletion
from crawlherd.worker.details import DetailLedger
from crawlherd.worker.jobcrawl import ListingOutcome
from crawlherd.worker.options import PAGE_DISPATCHERS, WorkerOptions, WorkerStats
from crawlherd.worker.pages import PagePipeline
from crawlherd.worker.refusals import Refusals, own_refusal
from crawlherd.worker.runs import RunStore

__all__ = ["PAGE_DISPATCHERS", "Worker", "WorkerOptions", "WorkerStats"]

log = logging.getLogger(__name__)


class Worker(AsyncClosing):
    """Consumes ``broker`` and crawls each job, with ``options`` (:class:`WorkerOptions`). ``engine``
    (config DB) and ``broker`` are the caller's; ``sink`` is where items go (anything with the sink
    protocol of :mod:`crawlherd.sinks.base`; default the SQL sink on ``engine``); ``browser_factory``
    makes the browser crawler for websites that need one (default: Playwright with the system
    Chromium)."""

    def __init__(
        self,
        engine: AsyncEngine,
        broker: Broker,
        options: WorkerOptions | None = None,
        *,
        sink: Sink | None = None,
        browser_factory: Callable[[FetchLimits], Crawler] | None = None,
    ) -> None:
        self.options = options = options or WorkerOptions()
        self.engine = engine
        self.broker = broker
        self.name = options.name or f"{socket.gethostname()}:{os.getpid()}"
        self.stats = WorkerStats()
        self.runs = RunStore(engine)
        self.details = DetailLedger(engine)
        self.sink: Sink = sink if sink is not None else SQLSink(engine)
        self.outages = OutageLog(log, f"worker {self.name}")
        self.retrier = Retrier(self.outages)  # temporary: BackendUnavailableError (a service's outage)
        self.refusals = Refusals(log, f"worker {self.name}")
        self.pages = PagePipeline(
            options, name=self.name, stats=self.stats, runs=self.runs, details=self.details, sink=self.sink,
            retrier=self.retrier, browser_factory=browser_factory,
        )
        self.completion = JobCompletion(options, name=self.name, pages=self.pages, runs=self.runs,
                                        details=self.details)

    @property
    def frontier(self) -> Frontier | None:
        """The frontier of the worker's pages (open between enter and close)."""
        return self.pages.frontier

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> Worker:
        await self.pages.open()
        return self

    async def close(self) -> None:
        await self.pages.close()
        await self.runs.close()

    async def idle(self) -> bool:
        """No job in flight here and no page queued or in flight in the frontier."""
        return self.stats.in_flight == 0 and await self.pages.idle()

    async def run(self, stop: asyncio.Event | None = None) -> WorkerStats:
        """Consume until ``stop`` is set (or forever), then shut down as the module docstring says."""
        stop = stop or asyncio.Event()
        if not self.pages.opened:
            await self.__aenter__()
        tasks: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(self.options.concurrency)
        pages_stop = asyncio.Event()
        consumer = asyncio.create_task(self._consume(stop, slots, tasks), name="worker-consume")
        pages = asyncio.create_task(self.pages.run(pages_stop), name="worker-pages")
        stopper = asyncio.create_task(stop.wait(), name="worker-stop")
        beat = Heartbeat(
            self.engine, kind="worker", name=self.name, interval=self.options.heartbeat_interval,
            jobs_in_hand=lambda: self.stats.in_flight, details=self._beat_details,
            outages=self.outages,  # a failed beat: the config DB's outage
        )
        beating = asyncio.create_task(beat.run(stop), name="worker-heartbeat")
        try:
            done, _ = await asyncio.wait({consumer, pages, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for t in done - {stopper}:
                t.result()  # a broker or frontier failure surfaces here
        finally:
            for t in (consumer, stopper):
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
            stop.set()
            await self._drain(tasks, pages)
            pages_stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await pages
            await beating  # marks the worker stopped
            for t in list(tasks):  # the page loop failed: nothing can finish them
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        return self.stats

    async def _beat_details(self) -> dict[str, object]:
        """What the heartbeat carries: the frontier's counts and the worker's counters (the console's
        row of this worker)."""
        return {**await self.pages.frontier_counts(), "counters": self.stats.counters()}

    async def _consume(self, stop: asyncio.Event, slots: asyncio.Semaphore, tasks: set[asyncio.Task[None]]) -> None:
        """Take deliveries, ``slots`` at a time, each handled in a task of ``tasks``, until ``stop`` or
        the broker is closed. The broker gone: said once, consumed again after a back-off."""
        attempts = self.retrier.attempts("broker", stop=stop)
        # Down at start-up (said by the command before the worker ran): ended by the first answer here.
        said_at_start = service_name("broker") in self.outages.down_now
        while not stop.is_set():
            try:
                if attempts.failures or said_at_start:  # still down? (a cheap call; consume() would raise the same)
                    async with asyncio.timeout(15.0):
                        await self.broker.pending()
                    attempts.succeeded()
                    if said_at_start:
                        self.outages.up("broker")
                        said_at_start = False
                deliveries = self.broker.consume(prefetch=self.options.concurrency)
                try:
                    async for delivery in deliveries:
                        await slots.acquire()
                        task = asyncio.create_task(self._guarded(delivery, slots), name=f"job:{delivery.key}")
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                finally:
                    await deliveries.aclose()
                return  # the broker was closed
            except (BackendUnavailableError, TimeoutError) as exc:  # temporary: the broker's outage
                try:
                    await attempts.failed(exc)
                except Stopped:
                    return

    async def _drain(self, tasks: set[asyncio.Task[None]], pages: asyncio.Task[None]) -> None:
        """Shutdown: the jobs in flight get ``shutdown_timeout`` seconds; the rest are cancelled (their
        deliveries go back to the queue at once, see _guarded)."""
        if not tasks or pages.done():
            return
        # The page loop keeps running meanwhile: the jobs in flight wait on their listing pages.
        log.info("worker %s: waiting up to %.0fs for %d job(s) in flight",
                 self.name, self.options.shutdown_timeout, len(tasks))
        _, pending = await asyncio.wait(set(tasks), timeout=self.options.shutdown_timeout)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def process(self, delivery: Delivery) -> None:
        """Handle one delivery to the end with the page loop running meanwhile: for callers that take
        deliveries themselves (a Celery task, a serverless function) instead of :meth:`run`. Detail
        pages the job queued and this call did not reach stay in the frontier for the next one."""
        if not self.pages.opened:
            await self.__aenter__()
        pages_stop = asyncio.Event()
        pages = asyncio.create_task(self.pages.run(pages_stop), name="worker-pages")
        try:
            await self.handle(delivery)
        finally:
            pages_stop.set()
            await pages

    # -- one delivery -----------------------------------------------------------------------------

    async def _requeue(self, delivery: Delivery) -> None:
        """Give ``delivery`` back to the broker at once (bounded: a broker that hangs holds up no stop)."""
        async with asyncio.timeout(5.0):
            await self.broker.nack(delivery, requeue=True)

    async def _guarded(self, delivery: Delivery, slots: asyncio.Semaphore) -> None:
        self.stats.in_flight += 1
        metrics.JOBS_IN_FLIGHT.inc()
        heartbeat = asyncio.create_task(self._heartbeat(delivery), name=f"heartbeat:{delivery.key}")
        try:
            await self.handle(delivery)
        except asyncio.CancelledError:
            # shutdown: give the delivery back at once, so that another worker takes it in seconds
            self.stats.requeued += 1
            heartbeat.cancel()
            with contextlib.suppress(CrawlherdError, TimeoutError):
                await asyncio.shield(self._requeue(delivery))
            raise
        except Exception as exc:  # noqa: BLE001 - a service outage or a bug: never lose the job, never loop
            await self._unexpected(delivery, exc)
        finally:
            heartbeat.cancel()
            self.stats.in_flight -= 1
            metrics.JOBS_IN_FLIGHT.dec()
            slots.release()

    async def _settle(self, operation: Callable[[], Awaitable[None]]) -> None:
        """Settle a delivery; while the broker cannot be reached, keep trying with back-off (the
        delivery stays held: left alone, it would wait out its lease). Cancelled at shutdown."""
        try:
            await self.retrier.call(operation, role="broker")
        except BrokerError as exc:  # the delivery was lost (channel gone, lease expired): it comes back
            log.warning("worker %s: %s", self.name, exc)
            self.stats.remember(str(exc))

    async def _heartbeat(self, delivery: Delivery) -> None:
        """Extend the claim on ``delivery`` every third of the broker's lease while the job runs. A slow
        extension (a busy database, a loaded machine) is waited for as long as a claim lasts -- the next
        one starts a third of a lease after it began, at once if it took longer -- not given up after a
        third of the lease; one that failed is tried again after a ninth of it."""
        lease = self.broker.lease
        if not lease:  # the broker holds the claim server-side: nothing to extend
            return
        loop = asyncio.get_running_loop()
        every = max(0.05, lease / 3)
        pause = every
        while True:
            await asyncio.sleep(pause)
            started = loop.time()
            try:
                async with asyncio.timeout(lease):
                    await self.broker.touch(delivery)
            except BrokerError as exc:  # settled meanwhile, or lost: nothing more to extend
                log.debug("worker %s: stopped extending %s: %s", self.name, delivery.key, exc)
                return
            except (BackendUnavailableError, TimeoutError) as exc:
                log.debug("worker %s: could not extend %s: %s", self.name, delivery.key, exc)
                pause = every / 3
                continue
            pause = max(0.0, started + every - loop.time())

    async def _unexpected(self, delivery: Delivery, exc: Exception) -> None:
        """A delivery whose handling raised: an outage (of the service its ``role`` names) sends it back
        after a back-off (not an attempt: the job did not run); anything else counts as a failed attempt."""
        try:
            if isinstance(exc, BackendUnavailableError):
                self.outages.down(role_of(exc, "broker"), summarize(exc))
                self.stats.requeued += 1
                await self._settle(lambda: self.broker.retry(delivery, delay=self.retry_delay(1)))
                return
            log.error("worker %s: job %s failed unexpectedly: %s", self.name, delivery.key, summarize(exc),
                      exc_info=exc)
            job = decode_job(delivery.body)
            await self._failed(delivery, job, f"unexpected error: {summarize(exc)}", started=time.monotonic(),
                               record=False)
        except CrawlherdError as again:  # the broker failed too: the delivery comes back after its lease
            self.stats.remember(f"{delivery.key}: {again}")
            log.debug("worker %s: could not settle %s: %s", self.name, delivery.key, again)

    async def handle(self, delivery: Delivery) -> None:
        """Process one delivery to the end: acked, retried, dead-lettered or skipped. Its pages are
        fetched by the page loop (:meth:`run`), which must be running."""
        self.stats.received += 1
        try:
            job = decode_job(delivery.body)
        except MessageError as exc:
            self.stats.invalid += 1
            metrics.JOBS.labels(outcome="invalid").inc()
            self.stats.remember(f"invalid message {delivery.key!r}: {exc}")
            log.warning("worker %s: dead-lettering invalid message %r: %s", self.name, delivery.key, exc)
            why = f"invalid job message: {exc}"
            await self._settle(lambda: self.broker.dead_letter(delivery, why))
            return
        refused = await own_refusal(job, self.options.limits)
        if refused is not None:  # no attempt can cure this here: given back, none spent
            self.stats.refused += 1
            metrics.JOBS.labels(outcome="refused").inc()
            self.refusals.refused(job, refused)
            await self._settle(lambda: self.broker.retry(delivery, delay=self.retry_delay(1)))
            return
        started = time.monotonic()
        try:
            status = await self.runs.start(job, worker=self.name)  # None: started; else already finished
        except PermanentJobError as exc:
            self.outages.up("database")
            await self._failed(delivery, job, str(exc), started=started, permanent=True, record=False)
            return
        self.outages.up("database")
        if status is not None:
            self.stats.skipped += 1
            metrics.JOBS.labels(outcome="skipped").inc()
            log.info("worker %s: job %s already %s; skipped", self.name, job.idempotency_key, status)
            await self._settle(lambda: self.broker.ack(delivery))
            return
        try:
            outcome = await self._crawl(job)
        except BackendUnavailableError:
            raise  # an outage, not the job's fault: back to the broker after a delay, not an attempt
        except CrawlherdError as exc:
            outcome = ListingOutcome(error=str(exc))
        if outcome.error is not None:
            await self._failed(delivery, job, outcome.error, started=started, permanent=outcome.permanent,
                               done=outcome)
            return
        if not await self.runs.finish(
            job,
            status="succeeded",
            pages=outcome.pages,
            items_new=outcome.items_new,
            items_updated=outcome.items_updated,
        ):
            await self._disowned(delivery, job)
            return
        await self._settle(lambda: self.broker.ack(delivery))
        metrics.job_finished(
            "succeeded",
            seconds=time.monotonic() - started,
            pages=outcome.pages,
            items_new=outcome.items_new,
            items_updated=outcome.items_updated,
        )
        self.stats.succeeded += 1
        self.stats.count(outcome)
        log.info(
            "worker %s: job %s done: %d listing pages, %d new and %d updated items, its detail pages settled",
            self.name,
            job.idempotency_key,
            outcome.pages,
            outcome.items_new,
            outcome.items_updated,
        )

    async def _disowned(self, delivery: Delivery, job: JobMessage) -> None:
        """``job``'s run was taken over by another worker while this one was stalled (its claim on the
        delivery ran out), or finished by another with another outcome: the run is left as it is, and
        the delivery is acked -- refused by a broker that gave it to the other worker (its claim is
        fenced), or a duplicate of the other's."""
        self.stats.skipped += 1
        log.warning("worker %s: job %s was taken over or finished by another worker while this one was stalled; "
                    "its run is left as it is", self.name, job.idempotency_key)
        try:
            await self.retrier.call(lambda: self.broker.ack(delivery), role="broker")
        except BrokerError as exc:  # expected: the other worker holds the delivery now
            log.debug("worker %s: %s", self.name, exc)

    async def _crawl(self, job: JobMessage) -> ListingOutcome:
        """Crawl ``job``: its listing chain, then its detail pages (:mod:`crawlherd.worker.completion`)."""
        return await self.completion.crawl(job)

    async def _failed(self, delivery: Delivery, job: JobMessage, reason: str, *, started: float,
                      permanent: bool = False, record: bool = True, done: ListingOutcome | None = None) -> None:
        """Retry ``job`` after a back-off, or dead-letter it. ``record``: in ``job_runs`` too (best effort
        when False: the run may not be recordable). ``started``: when the attempt began (metrics).
        ``done``: what the attempt's listing pages read and stored before it failed (counted as a
        success's are: a retry finds those items stored already)."""
        attempts = job.attempt_count + 1
        self.stats.remember(f"{job.idempotency_key} attempt {attempts}: {reason}")
        done = done or ListingOutcome()
        counts = {"pages": done.pages, "items_new": done.items_new, "items_updated": done.items_updated}

        async def finish(status: str) -> bool:
            """False: the run is another worker's now (fencing), nothing recorded."""
            if record:
                return await self.runs.finish(job, status=status, error=reason, **counts)
            try:
                await self.runs.finish(job, status=status, error=reason, **counts)
            except Exception as exc:  # noqa: BLE001 - the broker is what keeps the job
                log.debug("worker %s: could not record %s as %s: %s", self.name, job.idempotency_key, status, exc)
            return True

        if attempts >= self.options.max_attempts or permanent:
            if not await finish("dead"):
                await self._disowned(delivery, job)
                return
            why = "no attempt can do better" if permanent and attempts < self.options.max_attempts else (
                f"attempt {attempts} of {self.options.max_attempts}"
            )
            await self._settle(lambda: self.broker.dead_letter(delivery, f"{why}: {reason}"))
            self.stats.dead += 1
            metrics.job_finished("dead", seconds=time.monotonic() - started, **counts)
            self.stats.count(done)
            log.error("worker %s: job %s is dead (%s): %s", self.name, job.idempotency_key, why, reason)
            return
        delay = self.retry_delay(attempts)
        if not await finish("failed"):
            await self._disowned(delivery, job)
            return
        body = encode_job(job.model_copy(update={"attempt_count": attempts}))
        await self._settle(lambda: self.broker.retry(delivery, delay=delay, body=body))
        self.stats.retried += 1
        metrics.job_finished("retried", seconds=time.monotonic() - started, **counts)
        self.stats.count(done)
        log.warning(
            "worker %s: job %s failed (attempt %d of %d), retrying in %.1fs: %s",
            self.name,
            job.idempotency_key,
            attempts,
            self.options.max_attempts,
            delay,
            reason,
        )


    def retry_delay(self, attempts: int) -> float:
        """A job's back-off before its next attempt: :func:`~crawlherd._resilience.backoff_delay` from
        ``backoff`` seconds, doubling per attempt, capped at ``max_backoff``, with 20 % jitter."""
        return backoff_delay(attempts, base=self.options.backoff, cap=self.options.max_backoff, jitter=0.2)
