"""The worker: consumes job messages and crawls them through the engine.

For each delivery: decode and validate the message (an invalid one is dead-lettered with the
reason) -> record the run as ``running`` -- or skip it when its run already succeeded (idempotency:
the same target and slot; the check and the start are one statement) -> queue the job's first
listing page in the worker's frontier -> wait for the listing chain's outcome -> record
``succeeded`` -> ack.

Every page -- listing or detail, of any job -- goes through the worker's one frontier and one page
loop (the engine's dispatcher): the website's politeness (``min_delay``, ``max_concurrency``) is the
frontier's host policy and holds for every page, across workers when the frontier is shared (Redis).
Whoever leases a listing page (this worker or another one sharing the frontier) fetches it, stores its
new items, queues their detail pages and the next listing page; the end of the chain is reported to
the job's owner -- in process when the owner is this worker, else in ``job_runs`` (the owner polls
its run's row). See :mod:`crawlherd.worker.jobcrawl` and ``docs/worker.md``.

A website's ``robots = "obey"`` is honoured for listing and detail pages: a page robots.txt disallows
is not fetched (a disallowed listing page makes the job dead at once: no attempt can do better), and
its Crawl-delay raises the host's delay in the frontier.
A job that fails is published again with ``attempt_count + 1`` after an exponential back-off; after
``max_attempts`` it is ``dead`` (in ``job_runs`` and in the broker's dead-letter store).

Shutdown (``stop`` set, SIGTERM, Ctrl+C): no new deliveries are taken; jobs in flight get
``shutdown_timeout`` seconds to finish; the rest are cancelled and their deliveries given back to the
queue at once (another worker takes them in seconds), so a restart loses no job.

Poison messages: a body that is not a valid job (:func:`~crawlherd.messages.decode_job`: too large,
not UTF-8, too deep, wrong types) is dead-lettered at once with the reason; a job for a target that no
longer exists too. A job whose handling fails with an unexpected error (a bug) counts as an attempt:
retried after a back-off, dead after ``max_attempts``. A message that kills its worker outright is
bounded by the broker's ``max_deliveries``. Nothing is ever requeued for immediate redelivery, except
the deliveries given back at shutdown.

Outages: when the broker, the frontier or the config DB stops answering, the worker says so once (a
warning), keeps trying with back-off (a job it could not record goes back to the broker with a delay,
not counted as an attempt), and says once when it is back (an info line).

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
import random
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd import metrics
from crawlherd._aio import until_done
from crawlherd._options import Count, Delay, Seconds, check_options
from crawlherd._resilience import OutageLog, backoff_delay
from crawlherd.brokers.base import Broker, Delivery
from crawlherd.crawler import Crawler, CrawlerRunConfig
from crawlherd.crawler.concurrency import MemoryAdaptiveDispatcher, RateLimiter, SemaphoreDispatcher
from crawlherd.crawler.concurrency.base import Dispatcher
from crawlherd.db.errors import is_db_unavailable
from crawlherd.db.heartbeat import Heartbeat
from crawlherd.errors import (
    BackendUnavailableError,
    BrokerError,
    ConfigurationError,
    CrawlherdError,
    JobError,
    MessageError,
    PermanentJobError,
    summarize,
)
from crawlherd.extract.handlers import run_extractor
from crawlherd.extract.rules import Page
from crawlherd.extract.selectors import call_for_page
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.gate import SendStamps
from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.item import Item
from crawlherd.messages import JobMessage, decode_job, encode_job
from crawlherd.request import Request
from crawlherd.result import CrawlResult
from crawlherd.sinks import DETAIL_AT, Sink, SQLSink
from crawlherd.sinks.base import UpsertCounts
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.grouped import GroupedWrites
from crawlherd.worker.jobcrawl import DetailPage, ListingOutcome, ListingState, detail_requests
from crawlherd.worker.runs import RunStore

__all__ = ["PAGE_DISPATCHERS", "Worker", "WorkerOptions", "WorkerStats"]

#: The engine dispatchers a worker can run its pages with.
PageDispatcher = Literal["semaphore", "memory-adaptive"]
PAGE_DISPATCHERS: tuple[str, ...] = get_args(PageDispatcher)

log = logging.getLogger(__name__)


@dataclass
class WorkerStats:
    """Counters since the worker started."""

    received: int = 0
    succeeded: int = 0
    skipped: int = 0
    retried: int = 0
    dead: int = 0
    invalid: int = 0
    requeued: int = 0
    pages: int = 0
    detail_pages: int = 0
    detail_failures: int = 0
    items_new: int = 0
    items_updated: int = 0
    in_flight: int = 0
    last_errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """A worker's options. ``concurrency`` jobs at once (also the broker prefetch); ``page_dispatcher``
    -- the engine dispatcher that runs every page, listing and detail (``semaphore`` or
    ``memory-adaptive``) -- with ``page_concurrency`` pages in flight; ``frontier_url`` the frontier of
    those pages (``memory://``, ``sqlite:///file``, ``redis://...`` shared by all workers);
    ``lease_timeout`` of the frontier's leases (None: the frontier URL's ``?lease_timeout=``, else the
    frontier's default); ``max_attempts`` before a job is dead; ``backoff`` and ``max_backoff`` seconds
    (doubling per attempt, with jitter); ``limits`` for the fetchers; ``shutdown_timeout`` for jobs in
    flight at shutdown; ``name`` of the process (default: host and pid); ``poll_interval`` seconds
    between two looks at ``job_runs`` while a job's listing is read by another worker;
    ``heartbeat_interval`` seconds between the process's heartbeats."""

    concurrency: Count = 4
    page_dispatcher: PageDispatcher = "semaphore"
    page_concurrency: Count = 8
    frontier_url: str = "memory://"
    lease_timeout: Seconds | None = None
    max_attempts: Count = 3
    backoff: Delay = 5.0
    max_backoff: Delay = 600.0
    limits: FetchLimits = field(default_factory=FetchLimits)
    shutdown_timeout: Delay = 30.0
    name: str | None = None
    poll_interval: Seconds = 1.0
    heartbeat_interval: Seconds = 10.0

    def __post_init__(self) -> None:
        check_options(self, "worker")
        if self.max_backoff < self.backoff:
            raise ConfigurationError(f"need backoff <= max_backoff, got {self.backoff!r} and {self.max_backoff!r}")


class Worker:
    """Consumes ``broker`` and crawls each job, with ``options`` (:class:`WorkerOptions`). ``engine``
    (config DB) and ``broker`` are the caller's; ``sink`` is where items go (anything with the sink
    protocol of :mod:`crawlherd.sinks.base`; default the SQL sink on ``engine``); ``browser_factory``
    makes the browser crawler for websites that need one (default: Playwright with the system
    Chromium)."""

    #: The pages' items, stored together (group commit; made on first use, see _store).
    _writes: GroupedWrites | None = None
    #: Each crawler's run config with the robots setting flipped, by crawler (see _run_config).
    _flipped: dict[int, tuple[CrawlerRunConfig, CrawlerRunConfig]] | None = None

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
        self.sink: Sink = sink if sink is not None else SQLSink(engine)
        self._browser_factory = browser_factory or _default_browser
        self._http: Crawler | None = None
        self._browser: Crawler | None = None
        self._browser_lock = asyncio.Lock()
        self.frontier: Frontier | None = None
        self._new_pages = asyncio.Event()
        # The listing chains of the jobs this worker owns, by run: where their outcome is reported.
        self._chains: dict[str, asyncio.Future[ListingOutcome]] = {}
        self.outages = OutageLog(log, f"worker {self.name}")

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> Worker:
        lease = {} if self.options.lease_timeout is None else {"lease_timeout": self.options.lease_timeout}
        self.frontier = await open_scheduler(self.options.frontier_url, **lease).__aenter__()
        self._http = self._share_gate(await Crawler(limits=self.options.limits).__aenter__())
        return self

    def _share_gate(self, crawler: Crawler) -> Crawler:
        """A frontier shared by processes (Redis) keeps each host's delay at the moment of sending,
        across the fleet: the crawler's send gate asks it (:meth:`HostGate.share`)."""
        crawler.gate.share(self.frontier if isinstance(self.frontier, SendStamps) else None)
        return crawler

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._writes is not None:
            await self._writes.close()
            self._writes = None
        for crawler in (self._http, self._browser):
            if crawler is not None:
                await crawler.close()
        self._http = self._browser = None
        if self.frontier is not None:
            await self.frontier.close()
            self.frontier = None

    async def idle(self) -> bool:
        """No job in flight here and no page queued or in flight in the frontier."""
        return self.stats.in_flight == 0 and (self.frontier is None or await self.frontier.idle())

    async def run(self, stop: asyncio.Event | None = None) -> WorkerStats:
        """Consume until ``stop`` is set (or forever), then shut down as the module docstring says."""
        stop = stop or asyncio.Event()
        if self._http is None:
            await self.__aenter__()
        tasks: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(self.options.concurrency)
        pages_stop = asyncio.Event()

        async def consume() -> None:
            failures = 0
            while not stop.is_set():
                try:
                    if failures:  # still down? (a cheap call; consume() would raise the same)
                        await asyncio.wait_for(self.broker.pending(), 15.0)
                        self.outages.up("broker")
                        failures = 0
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
                except (BackendUnavailableError, TimeoutError) as exc:
                    failures += 1
                    self.outages.down("broker", summarize(exc))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), backoff_delay(failures))

        consumer = asyncio.create_task(consume(), name="worker-consume")
        pages = asyncio.create_task(self._page_loop(pages_stop), name="worker-pages")
        stopper = asyncio.create_task(stop.wait(), name="worker-stop")
        beat = Heartbeat(
            self.engine, kind="worker", name=self.name, interval=self.options.heartbeat_interval,
            jobs_in_hand=lambda: self.stats.in_flight,
            details=self._frontier_counts, outages=self.outages,  # a failed beat: the "config DB" outage, said once
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
            if tasks and not pages.done():
                # The page loop keeps running meanwhile: the jobs in flight wait on their listing pages.
                log.info(
                    "worker %s: waiting up to %.0fs for %d job(s) in flight",
                    self.name,
                    self.options.shutdown_timeout,
                    len(tasks),
                )
                _, pending = await asyncio.wait(set(tasks), timeout=self.options.shutdown_timeout)
                for t in pending:
                    t.cancel()  # their deliveries are requeued by _guarded
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
            pages_stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await pages
            await beating  # marks the worker stopped
            for t in list(tasks):  # the page loop failed: nothing can finish them
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        return self.stats

    async def process(self, delivery: Delivery) -> None:
        """Handle one delivery to the end with the page loop running meanwhile: for callers that take
        deliveries themselves (a Celery task, a serverless function) instead of :meth:`run`. Detail
        pages the job queued and this call did not reach stay in the frontier for the next one."""
        if self._http is None:
            await self.__aenter__()
        pages_stop = asyncio.Event()
        pages = asyncio.create_task(self._page_loop(pages_stop), name="worker-pages")
        try:
            await self.handle(delivery)
        finally:
            pages_stop.set()
            await pages

    # -- one delivery -----------------------------------------------------------------------------

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
                await asyncio.shield(asyncio.wait_for(self.broker.nack(delivery, requeue=True), 5.0))
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
        failures = 0
        while True:
            try:
                await operation()
            except BackendUnavailableError as exc:
                failures += 1
                self.outages.down("broker", summarize(exc))
                await asyncio.sleep(backoff_delay(failures))
                continue
            except BrokerError as exc:  # the delivery was lost (channel gone, lease expired): it comes back
                log.warning("worker %s: %s", self.name, exc)
                self._remember(str(exc))
                return
            if failures:
                self.outages.up("broker")
            return

    async def _heartbeat(self, delivery: Delivery) -> None:
        """Extend the claim on ``delivery`` every third of the broker's lease while the job runs."""
        lease = getattr(self.broker, "lease", None)
        touch = getattr(self.broker, "touch", None)
        if not lease or touch is None:  # a broker without client-side leases (or without touch)
            return
        every = max(0.05, lease / 3)
        while True:
            await asyncio.sleep(every)
            try:
                await asyncio.wait_for(touch(delivery), every)
            except BrokerError as exc:  # settled meanwhile, or lost: nothing more to extend
                log.debug("worker %s: stopped extending %s: %s", self.name, delivery.key, exc)
                return
            except (BackendUnavailableError, TimeoutError) as exc:
                log.debug("worker %s: could not extend %s: %s", self.name, delivery.key, exc)

    async def _unexpected(self, delivery: Delivery, exc: Exception) -> None:
        """A delivery whose handling raised: an outage sends it back after a back-off (not an attempt:
        the job did not run); anything else counts as a failed attempt."""
        outage = _outage_of(exc)
        try:
            if outage is not None:
                self.outages.down(outage, summarize(exc))
                self.stats.requeued += 1
                await self._settle(lambda: self.broker.retry(delivery, delay=self.retry_delay(1)))
                return
            log.error("worker %s: job %s failed unexpectedly: %s", self.name, delivery.key, summarize(exc),
                      exc_info=exc)
            job = decode_job(delivery.body)
            await self._failed(delivery, job, f"unexpected error: {summarize(exc)}", started=time.monotonic(),
                               record=False)
        except CrawlherdError as again:  # the broker failed too: the delivery comes back after its lease
            self._remember(f"{delivery.key}: {again}")
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
            self._remember(f"invalid message {delivery.key!r}: {exc}")
            log.warning("worker %s: dead-lettering invalid message %r: %s", self.name, delivery.key, exc)
            why = f"invalid job message: {exc}"
            await self._settle(lambda: self.broker.dead_letter(delivery, why))
            return
        started = time.monotonic()
        try:
            status = await self.runs.start(job, worker=self.name)  # None: started; else already finished
        except PermanentJobError as exc:
            self.outages.up("config DB")
            await self._failed(delivery, job, str(exc), started=started, permanent=True, record=False)
            return
        self.outages.up("config DB")
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
            await self._failed(delivery, job, outcome.error, started=started, permanent=outcome.permanent)
            return
        await self.runs.finish(
            job,
            status="succeeded",
            pages=outcome.pages,
            items_new=outcome.items_new,
            items_updated=outcome.items_updated,
        )
        await self._settle(lambda: self.broker.ack(delivery))
        metrics.job_finished(
            "succeeded",
            seconds=time.monotonic() - started,
            pages=outcome.pages,
            items_new=outcome.items_new,
            items_updated=outcome.items_updated,
        )
        self.stats.succeeded += 1
        self.stats.pages += outcome.pages
        log.info(
            "worker %s: job %s done: %d listing pages, %d new and %d updated items, %d detail pages queued",
            self.name,
            job.idempotency_key,
            outcome.pages,
            outcome.items_new,
            outcome.items_updated,
            outcome.details_queued,
        )

    async def _crawl(self, job: JobMessage) -> ListingOutcome:
        """Queue the job's first listing page and wait for the end of its chain: reported in process
        when this worker reads the last page, else found in the job's ``job_runs`` row."""
        assert self.frontier is not None
        site = job.site
        site.extractor()  # no rules and no handler: fail now, not on every page
        state = ListingState(job=job, owner=self.name)
        request = state.request(site.paginator.first_url(job.search_url))
        outcome: asyncio.Future[ListingOutcome] = asyncio.get_running_loop().create_future()
        self._chains[state.run] = outcome
        try:
            await self._politeness(site, request.host)
            if not await self.frontier.enqueue_request(request):
                raise JobError(f"the frontier refused listing page {request.url}")
            self._new_pages.set()
            while True:
                done, _ = await asyncio.wait({outcome}, timeout=self.options.poll_interval)
                if done:
                    return outcome.result()
                remote = await self.runs.reported(job, worker=self.name)
                if remote is not None:
                    return remote
        finally:
            self._chains.pop(state.run, None)

    async def _failed(self, delivery: Delivery, job: JobMessage, reason: str, *, started: float,
                      permanent: bool = False, record: bool = True) -> None:
        """Retry ``job`` after a back-off, or dead-letter it. ``record``: in ``job_runs`` too (best effort
        when False: the run may not be recordable). ``started``: when the attempt began (metrics)."""
        attempts = job.attempt_count + 1
        self._remember(f"{job.idempotency_key} attempt {attempts}: {reason}")

        async def finish(status: str) -> None:
            if record:
                await self.runs.finish(job, status=status, error=reason)
                return
            try:
                await self.runs.finish(job, status=status, error=reason)
            except Exception as exc:  # noqa: BLE001 - the broker is what keeps the job
                log.debug("worker %s: could not record %s as %s: %s", self.name, job.idempotency_key, status, exc)

        if attempts >= self.options.max_attempts or permanent:
            await finish("dead")
            why = "no attempt can do better" if permanent and attempts < self.options.max_attempts else (
                f"attempt {attempts} of {self.options.max_attempts}"
            )
            await self._settle(lambda: self.broker.dead_letter(delivery, f"{why}: {reason}"))
            self.stats.dead += 1
            metrics.job_finished("dead", seconds=time.monotonic() - started)
            log.error("worker %s: job %s is dead (%s): %s", self.name, job.idempotency_key, why, reason)
            return
        delay = self.retry_delay(attempts)
        await finish("failed")
        body = encode_job(job.model_copy(update={"attempt_count": attempts}))
        await self._settle(lambda: self.broker.retry(delivery, delay=delay, body=body))
        self.stats.retried += 1
        metrics.job_finished("retried", seconds=time.monotonic() - started)
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
        """Exponential back-off with jitter: ``backoff * 2**(attempts-1)`` times 0.8-1.2, capped."""
        base = min(self.options.max_backoff, self.options.backoff * 2 ** (attempts - 1))
        jittered: float = base * random.uniform(0.8, 1.2)
        return min(self.options.max_backoff, jittered)

    # -- pages ------------------------------------------------------------------------------------

    def _dispatcher(self, limiter: RateLimiter) -> Dispatcher:
        if self.options.page_dispatcher == "memory-adaptive":
            return MemoryAdaptiveDispatcher(max_session_permit=self.options.page_concurrency, rate_limiter=limiter)
        return SemaphoreDispatcher(self.options.page_concurrency, rate_limiter=limiter)

    async def _page_loop(self, stop: asyncio.Event) -> None:
        """Fetch the frontier's pages, listing and detail, until ``stop``; between bursts, wait for
        new ones (or poll: other workers sharing the frontier queue some too, and expired leases
        come back)."""
        assert self.frontier is not None
        frontier = self.frontier
        limiter = RateLimiter(base_delay=(0.0, 0.0), decay=0.5)  # 429 back-off; spacing is the frontier's
        failures = 0
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                try:
                    if failures:  # still down? (the frontier answers, or this raises the same)
                        await frontier.idle()
                        self.outages.up("frontier")
                        failures = 0
                    await self._run_pages(frontier, limiter, stopping)
                except Exception as exc:  # the frontier (or the DB behind a page) went away: wait, go on
                    unavailable = _unavailable_in(exc)
                    if unavailable is None:
                        raise
                    failures += 1
                    name = "config DB" if unavailable.backend == "database" else "frontier"
                    self.outages.down(name, summarize(unavailable))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), backoff_delay(failures))
                    continue
                self._new_pages.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(stop.wait(), self._new_pages.wait()), 1.0)
        finally:
            stopping.cancel()

    async def _run_pages(self, frontier: Frontier, limiter: RateLimiter, stopping: asyncio.Future[Any]) -> None:
        """One run of the engine's dispatcher over the frontier, until it has nothing more or ``stopping``
        is done (then what is in flight is cancelled and its leases go back)."""
        results = self._dispatcher(limiter).run(frontier, self._page)
        try:
            async for result in until_done(results, stopping):
                if not result.success:
                    await self._page_failed(result)
        finally:
            await results.aclose()  # type: ignore[attr-defined]

    async def _page(self, request: Request) -> CrawlResult:
        """The dispatcher's work for one page: fetch it *and* store what it holds, so that the lease is
        acked only once that is done (a worker stopped or killed in between loses nothing: the lease
        comes back, and storing again is idempotent)."""
        listing = ListingState.of(request)
        if listing is not None:
            return await self._listing_page(request, listing)
        detail = DetailPage.of(request)
        crawler = await self._crawler_for(detail is not None and detail.site.requires_playwright)
        site = detail.site if detail is not None else None
        result = await crawler.arun(request, self._run_config(crawler, site))
        metrics.observe_fetch(result)
        if result.success and detail is not None:
            await self._store_detail(result, detail)
        return result

    def _run_config(self, crawler: Crawler, site: SiteSpec | None) -> CrawlerRunConfig:
        obey = site is None or site.politeness.robots == "obey"
        config = crawler.config
        if config.check_robots_txt == obey:
            return config
        # the other robots setting: cloned once per crawler config, not once per page (it is frozen)
        if self._flipped is None:
            self._flipped = {}
        kept = self._flipped.get(id(crawler))
        if kept is None or kept[0] is not config:
            kept = self._flipped[id(crawler)] = (config, config.clone(check_robots_txt=obey))
        return kept[1]

    async def _politeness(self, site: SiteSpec, host: str, url: str | None = None) -> None:
        """The website's politeness as the frontier's policy for ``host`` (robots.txt's Crawl-delay,
        once known, raises the delay when the website obeys robots.txt)."""
        assert self.frontier is not None
        delay = site.politeness.min_delay
        if url is not None and site.politeness.robots == "obey":
            crawler = await self._crawler_for(site.requires_playwright)
            robots_delay = crawler.robots.crawl_delay(url)
            if not robots_delay or robots_delay <= delay:
                return
            delay = robots_delay
        await self.frontier.set_host_policy(host, delay=delay, max_in_flight=site.politeness.max_concurrency)

    async def _listing_page(self, request: Request, state: ListingState) -> CrawlResult:
        """One listing page of a chain: fetch, extract, store the new items, queue their detail pages
        and the next listing page -- or, on the last page, report the chain's outcome."""
        assert self.frontier is not None
        if state.owner == self.name and state.run not in self._chains:
            # This worker owned the job and gave it up (failed, or stopped): the page is not wanted.
            return CrawlResult(url=request.url, success=False, error_message="its job run has ended", request=request)
        job = state.job
        site = job.site
        crawler = await self._crawler_for(site.requires_playwright)
        result = await crawler.arun(request, self._run_config(crawler, site))
        metrics.observe_fetch(result)
        if not result.success:
            return result  # reported by _page_failed once the dispatcher settled it (a 429 is re-fetched first)
        await self._politeness(site, request.host, request.url)
        page = Page(
            url=result.final_url or request.url, html=result.text, website=site.name, status=result.status_code or 0
        )
        extraction = await run_extractor(site.extractor(), page)
        seen = set(state.seen)
        new: dict[bytes, Item] = {}
        for item in extraction.items:
            if item.fingerprint.hex() not in seen:
                new.setdefault(item.fingerprint, item)
        counts = await self._store(list(new.values()), website_id=job.website_id, target_id=job.target_id)
        details = detail_requests(job, new.values())
        for host in {r.host for r in details}:
            await self._politeness(site, host)
        queued = await self.frontier.enqueue_requests(details) if details else 0
        after = state.next(new=new.values(), items_new=counts.new, items_updated=counts.updated, details_queued=queued)
        paginator = site.paginator
        url = request.url
        nxt = await call_for_page(
            result.text, paginator.next_url, url, pages_fetched=state.page, html=result.text, new_items=len(new)
        )
        if nxt is None and paginator.type == "next_link" and state.page < paginator.max_pages:
            nxt = extraction.next_url
        if nxt is not None and nxt != url and await self.frontier.enqueue_request(after.request(nxt)):
            self._new_pages.set()
            return result
        outcome = ListingOutcome(
            pages=state.page,
            items_new=after.items_new,
            items_updated=after.items_updated,
            details_queued=after.details_queued,
        )
        await self._report(state, outcome)
        return result

    async def _page_failed(self, result: CrawlResult) -> None:
        """A page the dispatcher gave up on: a listing page fails its job; a detail page is counted
        (the listing's fields are kept; the revisit period brings it back)."""
        request = result.request
        state = ListingState.of(request) if request is not None else None
        if state is None:
            self.stats.detail_failures += 1
            self._remember(f"detail page {result.url}: {result.error_message}")
            return
        if state.owner == self.name and state.run not in self._chains:
            return  # its job run has ended
        robots = result.error_type == "RobotsDisallowedError"
        reason = f"listing page {result.url} failed: {result.error_message or result.status_code}"
        await self._report(state, ListingOutcome(pages=state.page - 1, error=reason, permanent=robots))

    async def _report(self, state: ListingState, outcome: ListingOutcome) -> None:
        """Tell the job's owner how its listing chain ended: in process, or through ``job_runs``."""
        chain = self._chains.get(state.run)
        if chain is not None:
            if not chain.done():
                chain.set_result(outcome)
            return
        if state.owner != self.name:
            await self.runs.report(state.job, worker=state.owner, outcome=outcome)

    async def _store_detail(self, result: CrawlResult, detail: DetailPage) -> None:
        rules = detail.site.detail_rules
        found: dict[str, object] = {}
        if rules is not None:
            found = await call_for_page(result.text, rules.extract_detail, result.text, result.final_url or result.url)
        fields = {**detail.fields, **{k: v for k, v in found.items() if v not in (None, "", [])}}
        now = datetime.now(UTC)
        fields[DETAIL_AT] = now.isoformat()
        item = Item(website=detail.site.name, url=result.url, fingerprint=bytes.fromhex(detail.item), fields=fields)
        counts = await self._store([item], website_id=detail.website_id, target_id=detail.target_id)
        metrics.items_stored(new=counts.new, updated=counts.updated)  # a listing's count with its job's
        self.stats.detail_pages += 1

    async def _store(self, items: list[Item], *, website_id: int, target_id: int | None) -> UpsertCounts:
        """Store a page's items, with those of the other pages that finished meanwhile (one write for
        all of them, see :mod:`crawlherd.worker.grouped`); returns once they are stored, so the page's
        lease is acked only after that."""
        if self._writes is None:
            self._writes = GroupedWrites(self.sink)
        counts = await self._writes.store(items, website_id=website_id, target_id=target_id)
        self.stats.items_new += counts.new
        self.stats.items_updated += counts.updated
        return counts

    async def _frontier_counts(self) -> dict[str, Any]:
        """The frontier's counts, for the heartbeat (and the console's Frontier page)."""
        if self.frontier is None:
            return {}
        st = await self.frontier.stats()
        metrics.FRONTIER.labels(state="queued").set(st.queued)
        metrics.FRONTIER.labels(state="in_flight").set(st.in_flight)
        return {"frontier": st.summary()}  # with each host's politeness state

    async def _crawler_for(self, browser: bool) -> Crawler:
        if not browser:
            assert self._http is not None
            return self._http
        async with self._browser_lock:
            if self._browser is None:  # started on first need; BrowserUnavailableError fails the job
                self._browser = self._share_gate(await self._browser_factory(self.options.limits).__aenter__())
            return self._browser

    def _remember(self, message: str) -> None:
        self.stats.last_errors = [*self.stats.last_errors[-9:], message]


def _default_browser(limits: FetchLimits) -> Crawler:
    from crawlherd.fetch.browser import BrowserFetcher

    return Crawler(fetcher=BrowserFetcher(limits=limits))


async def _first(*aws: Awaitable[object]) -> None:
    """Wait for the first of ``aws``; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def _outage_of(exc: BaseException) -> str | None:
    """The service whose outage ``exc`` is ("broker", "frontier", "config DB"), or None for a bug."""
    if isinstance(exc, BackendUnavailableError):
        if exc.backend == "database":
            return "config DB"
        return "frontier" if "frontier" in str(exc) else "broker"
    if isinstance(exc, CrawlherdError):
        return None
    if is_db_unavailable(exc) and type(exc).__name__ != "IntegrityError":
        return "config DB"
    return None


def _unavailable_in(exc: BaseException) -> BackendUnavailableError | None:
    """``exc`` itself, or the first leaf of an exception group (the dispatcher's task group), when it is
    a :class:`BackendUnavailableError` and the group holds nothing but those (and cancellations)."""
    if isinstance(exc, BackendUnavailableError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_unavailable_in(e) for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        if leaves and all(leaf is not None for leaf in leaves):
            return leaves[0]
    return None
