"""The worker: consumes job messages and crawls them through the engine.

For each delivery: decode and validate the message (an invalid one is dead-lettered with the
reason) -> skip it when its run already succeeded (idempotency: the same target and slot) -> record
the run as ``running`` -> crawl the job -> upsert its items -> record ``succeeded`` -> ack.
A job that fails is published again with ``attempt_count + 1`` after an exponential back-off; after
``max_attempts`` it is ``dead`` (in ``job_runs`` and in the broker's dead-letter store).

Shutdown (``stop`` set, SIGTERM, Ctrl+C): no new deliveries are taken; jobs in flight get
``shutdown_timeout`` seconds to finish; the rest are cancelled and their deliveries requeued, so a
restart loses no job.
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
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd import metrics
from crawlherd.brokers.base import Broker, Delivery
from crawlherd.crawler import Crawler
from crawlherd.db.heartbeat import Heartbeat
from crawlherd.db.models import Website
from crawlherd.dispatch import RateLimiter
from crawlherd.errors import ConfigurationError, CrawlherdError, MessageError
from crawlherd.extract.rules import ExtractionRules, Item
from crawlherd.fetch.base import FetchLimits
from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.messages import JobMessage, decode_job, encode_job
from crawlherd.request import Request
from crawlherd.result import CrawlResult
from crawlherd.sinks.sql import DETAIL_AT, SQLItemSink
from crawlherd.worker.jobcrawl import DETAIL_META, RateLimiters, SiteConfig, crawl_job, make_dispatcher
from crawlherd.worker.runs import RunStore

__all__ = ["Worker", "WorkerStats"]

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


class Worker:
    """Consumes ``broker`` and crawls each job. ``engine`` (config DB) and ``broker`` are the caller's.

    Options: ``concurrency`` jobs at once (also the broker prefetch); ``dispatcher`` (``semaphore`` or
    ``memory-adaptive``) for detail pages; ``max_attempts`` before a job is dead; ``backoff`` and
    ``max_backoff`` seconds (doubling per attempt, with jitter); ``limits`` for the fetchers;
    ``shutdown_timeout`` for jobs in flight at shutdown; ``browser_factory`` makes the browser fetcher
    for targets that need one (default: Playwright with the system Chromium); ``frontier_url`` the
    frontier of detail pages (``memory://``, ``sqlite:///file``, ``redis://...`` shared by all workers)
    and ``detail_concurrency`` the detail pages fetched at once.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        broker: Broker,
        *,
        concurrency: int = 4,
        dispatcher: str = "semaphore",
        max_attempts: int = 3,
        backoff: float = 5.0,
        max_backoff: float = 600.0,
        limits: FetchLimits | None = None,
        shutdown_timeout: float = 30.0,
        name: str | None = None,
        browser_factory: Callable[[FetchLimits], Crawler] | None = None,
        frontier_url: str = "memory://",
        detail_concurrency: int = 8,
        lease_timeout: float = 120.0,
    ) -> None:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(f"worker concurrency must be an integer >= 1, got {concurrency!r}")
        if dispatcher not in ("semaphore", "memory-adaptive"):
            raise ConfigurationError(f"unknown dispatcher {dispatcher!r}: use 'semaphore' or 'memory-adaptive'")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        if backoff < 0 or max_backoff < backoff:
            raise ConfigurationError(f"need 0 <= backoff <= max_backoff, got {backoff!r} and {max_backoff!r}")
        self.engine = engine
        self.broker = broker
        self.concurrency = concurrency
        self.dispatcher = dispatcher
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.limits = limits or FetchLimits()
        self.shutdown_timeout = shutdown_timeout
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.stats = WorkerStats()
        self.runs = RunStore(engine)
        self.sink = SQLItemSink(engine)
        self._limiters = RateLimiters()
        self._browser_factory = browser_factory or _default_browser
        self._http: Crawler | None = None
        self._browser: Crawler | None = None
        self._browser_lock = asyncio.Lock()
        self.frontier_url = frontier_url
        self.detail_concurrency = detail_concurrency
        self.lease_timeout = lease_timeout
        self.frontier: Frontier | None = None
        self._detail_rules: dict[str, ExtractionRules] = {}
        self._new_details = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> Worker:
        self.frontier = await open_scheduler(self.frontier_url, lease_timeout=self.lease_timeout).__aenter__()
        self._http = await Crawler(limits=self.limits).__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        for crawler in (self._http, self._browser):
            if crawler is not None:
                await crawler.close()
        self._http = self._browser = None
        if self.frontier is not None:
            await self.frontier.close()
            self.frontier = None

    async def idle(self) -> bool:
        """No job in flight here and no detail page queued or in flight in the frontier."""
        return self.stats.in_flight == 0 and (self.frontier is None or await self.frontier.idle())

    async def run(self, stop: asyncio.Event | None = None) -> WorkerStats:
        """Consume until ``stop`` is set (or forever), then shut down as the module docstring says."""
        stop = stop or asyncio.Event()
        if self._http is None:
            await self.__aenter__()
        tasks: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(self.concurrency)

        async def consume() -> None:
            async for delivery in self.broker.consume(prefetch=self.concurrency):
                await slots.acquire()
                task = asyncio.create_task(self._guarded(delivery, slots), name=f"job:{delivery.key}")
                tasks.add(task)
                task.add_done_callback(tasks.discard)

        beat = Heartbeat(self.engine, kind="worker", name=self.name, jobs_in_hand=lambda: self.stats.in_flight,
                         details=self._frontier_counts)  # console: heartbeat
        beating = asyncio.create_task(beat.run(stop), name="worker-heartbeat")
        consumer = asyncio.create_task(consume(), name="worker-consume")
        details = asyncio.create_task(self._detail_loop(stop), name="worker-details")
        stopper = asyncio.create_task(stop.wait(), name="worker-stop")
        try:
            done, _ = await asyncio.wait({consumer, details, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for t in done - {stopper}:
                t.result()  # a broker or frontier failure surfaces here
        finally:
            for t in (consumer, stopper):
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await details
            await beating  # console: heartbeat (marks the worker stopped)
            if tasks:
                log.info(
                    "worker %s: waiting up to %.0fs for %d job(s) in flight",
                    self.name,
                    self.shutdown_timeout,
                    len(tasks),
                )
                _, pending = await asyncio.wait(set(tasks), timeout=self.shutdown_timeout)
                for t in pending:
                    t.cancel()  # their deliveries are requeued by _guarded
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
        return self.stats

    async def _frontier_counts(self) -> dict[str, Any]:
        """The frontier's counts, for the heartbeat (and the console's Frontier page)."""
        if self.frontier is None:
            return {}
        st = await self.frontier.stats()
        metrics.FRONTIER.labels(state="queued").set(st.queued)
        metrics.FRONTIER.labels(state="in_flight").set(st.in_flight)
        hosts = dict(sorted(st.hosts.items(), key=lambda kv: -kv[1])[:50])
        return {"frontier": {"queued": st.queued, "in_flight": st.in_flight, "hosts": hosts,
                             "oldest_queued_age": st.oldest_queued_age}}

    # -- one delivery -----------------------------------------------------------------------------

    async def _guarded(self, delivery: Delivery, slots: asyncio.Semaphore) -> None:
        self.stats.in_flight += 1
        metrics.JOBS_IN_FLIGHT.inc()
        try:
            await self.handle(delivery)
        except asyncio.CancelledError:
            self.stats.requeued += 1
            with contextlib.suppress(CrawlherdError):
                await asyncio.shield(self.broker.nack(delivery, requeue=True))
            raise
        except Exception as exc:  # a bug or a service failure: requeue, never lose the job
            log.exception("worker %s: job %s failed unexpectedly; requeued", self.name, delivery.key)
            self._remember(f"{delivery.key}: {exc}")
            with contextlib.suppress(CrawlherdError):
                await self.broker.nack(delivery, requeue=True)
        finally:
            self.stats.in_flight -= 1
            metrics.JOBS_IN_FLIGHT.dec()
            slots.release()

    async def handle(self, delivery: Delivery) -> None:
        """Process one delivery to the end: acked, retried, dead-lettered or skipped."""
        self.stats.received += 1
        try:
            job = decode_job(delivery.body)
        except MessageError as exc:
            self.stats.invalid += 1
            metrics.JOBS.labels(outcome="invalid").inc()
            self._remember(f"invalid message {delivery.key!r}: {exc}")
            log.warning("worker %s: dead-lettering invalid message %r: %s", self.name, delivery.key, exc)
            await self.broker.dead_letter(delivery, f"invalid job message: {exc}")
            return
        status = await self.runs.status(job)
        if status in ("succeeded", "dead"):
            self.stats.skipped += 1
            metrics.JOBS.labels(outcome="skipped").inc()
            log.info("worker %s: job %s already %s; skipped", self.name, job.idempotency_key, status)
            await self.broker.ack(delivery)
            return
        await self.runs.start(job, worker=self.name)
        started = time.monotonic()
        try:
            site = SiteConfig.from_job(job)
            if site.detail_rules is not None:
                self._detail_rules[site.website] = site.detail_rules
            crawler = await self._crawler_for(job.requires_playwright)
            assert self.frontier is not None
            outcome = await crawl_job(job, crawler=crawler, frontier=self.frontier, limiters=self._limiters)
            counts = await self.sink.upsert(
                list(outcome.items.values()),
                website_id=job.website_id,
                target_id=job.target_id,
                seen_at=datetime.now(UTC),
            )
        except CrawlherdError as exc:
            await self._failed(delivery, job, str(exc), started)
            return
        await self.runs.finish(
            job, status="succeeded", pages=outcome.pages, items_new=counts.new, items_updated=counts.updated
        )
        await self.broker.ack(delivery)
        if outcome.details_queued:
            self._new_details.set()
        self.stats.succeeded += 1
        metrics.job_finished("succeeded", seconds=time.monotonic() - started, pages=outcome.pages,
                             items_new=counts.new, items_updated=counts.updated)
        self.stats.pages += outcome.pages
        self.stats.items_new += counts.new
        self.stats.items_updated += counts.updated
        log.info(
            "worker %s: job %s done: %d listing pages, %d new and %d updated items, %d detail pages queued",
            self.name,
            job.idempotency_key,
            outcome.pages,
            counts.new,
            counts.updated,
            outcome.details_queued,
        )

    async def _failed(self, delivery: Delivery, job: JobMessage, reason: str, started: float) -> None:
        attempts = job.attempt_count + 1
        self._remember(f"{job.idempotency_key} attempt {attempts}: {reason}")
        if attempts >= self.max_attempts:
            await self.runs.finish(job, status="dead", error=reason)
            await self.broker.dead_letter(delivery, f"attempt {attempts} of {self.max_attempts}: {reason}")
            self.stats.dead += 1
            metrics.job_finished("dead", seconds=time.monotonic() - started)
            log.error(
                "worker %s: job %s is dead after %d attempts: %s", self.name, job.idempotency_key, attempts, reason
            )
            return
        delay = self.retry_delay(attempts)
        await self.runs.finish(job, status="failed", error=reason)
        body = encode_job(job.model_copy(update={"attempt_count": attempts}))
        await self.broker.retry(delivery, delay=delay, body=body)
        self.stats.retried += 1
        metrics.job_finished("retried", seconds=time.monotonic() - started)
        log.warning(
            "worker %s: job %s failed (attempt %d of %d), retrying in %.1fs: %s",
            self.name,
            job.idempotency_key,
            attempts,
            self.max_attempts,
            delay,
            reason,
        )

    def retry_delay(self, attempts: int) -> float:
        """Exponential back-off with jitter: ``backoff * 2**(attempts-1)`` times 0.8-1.2, capped."""
        base = min(self.max_backoff, self.backoff * 2 ** (attempts - 1))
        jittered: float = base * random.uniform(0.8, 1.2)
        return min(self.max_backoff, jittered)

    # -- detail pages ---------------------------------------------------------------------------

    async def _detail_loop(self, stop: asyncio.Event) -> None:
        """Fetch the frontier's detail pages until ``stop``; between bursts, wait for new ones (or poll:
        other workers sharing the frontier queue some too, and expired leases come back)."""
        assert self.frontier is not None
        frontier = self.frontier
        limiter = RateLimiter(base_delay=(0.0, 0.0), decay=0.5)  # 429 back-off; spacing is the frontier's
        while not stop.is_set():
            dispatcher = make_dispatcher(self.dispatcher, self.detail_concurrency, limiter)
            results = dispatcher.run(frontier, self._fetch_and_store_detail)
            try:
                async for result in results:
                    if not result.success:
                        self.stats.detail_failures += 1
                        self._remember(f"detail page {result.url}: {result.error_message}")
                    if stop.is_set():
                        break  # what is in flight is cancelled and its leases go back
            finally:
                await results.aclose()  # type: ignore[attr-defined]
            self._new_details.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(stop.wait(), self._new_details.wait()), 1.0)

    async def _fetch_and_store_detail(self, request: Request) -> CrawlResult:
        """The dispatcher's work for one detail page: fetch it *and* store its item, so that the lease
        is acked only once the item is stored (a worker stopped or killed in between loses nothing:
        the lease comes back)."""
        info = request.meta.get(DETAIL_META) or {}
        crawler = await self._crawler_for(bool(info.get("browser")))
        result = await crawler.arun(request)
        metrics.observe_fetch(result)
        if result.success and info:
            await self._store_detail(result, info)
        return result

    async def _store_detail(self, result: CrawlResult, info: dict[str, Any]) -> None:
        rules = await self._rules_for(info["website"])
        detail = rules.extract_detail(result.text, result.final_url or result.url) if rules else {}
        fields = {**info["fields"], **{k: v for k, v in detail.items() if v not in (None, "", [])}}
        now = datetime.now(UTC)
        fields[DETAIL_AT] = now.isoformat()
        item = Item(website=info["website"], url=result.url, fingerprint=bytes.fromhex(info["item"]), fields=fields)
        counts = await self.sink.upsert([item], website_id=info["website_id"], target_id=info["target_id"], seen_at=now)
        self.stats.detail_pages += 1
        metrics.items_stored(new=counts.new, updated=counts.updated)
        self.stats.items_new += counts.new
        self.stats.items_updated += counts.updated

    async def _rules_for(self, website: str) -> ExtractionRules | None:
        """The website's rules: from a job this worker ran, else from the config DB (a detail page queued
        by another worker)."""
        rules = self._detail_rules.get(website)
        if rules is None:
            async with self.engine.connect() as conn:
                extraction = (await conn.execute(select(Website.extraction).where(Website.name == website))).scalar()
            if extraction:
                rules = self._detail_rules[website] = ExtractionRules.from_mapping(website, extraction)
        return rules

    async def _crawler_for(self, browser: bool) -> Crawler:
        if not browser:
            assert self._http is not None
            return self._http
        async with self._browser_lock:
            if self._browser is None:  # started on first need; BrowserUnavailableError fails the job
                self._browser = await self._browser_factory(self.limits).__aenter__()
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
