"""The worker's page pipeline: every page of the worker's frontier, listing and detail, of any job.

One frontier and one page loop (the engine's dispatcher) per worker: the website's politeness
(``min_delay``, ``max_concurrency``) is the frontier's host policy and holds for every page, across
workers when the frontier is shared (Redis). Whoever leases a listing page (this worker or another one
sharing the frontier) fetches it, stores its new items, queues their detail pages and the next listing
page; the end of the chain is reported to the job's owner -- in process when the owner is this worker
(:attr:`PagePipeline.chains`), else in ``job_runs`` (the owner polls its run's row). A detail page's
fields are merged over its listing's item. See :mod:`crawlherd.worker.jobcrawl` and ``docs/worker.md``.

A website's ``robots = "obey"`` is honoured for listing and detail pages: a page robots.txt disallows
is not fetched (a disallowed listing page makes the job dead at once: no attempt can do better), and
its Crawl-delay raises the host's delay in the frontier.

Outages: the frontier gone, the page loop says so once and tries again with back-off
(:class:`~crawlherd._resilience.Attempts`); the config DB gone while a chain's end is reported, the
report is retried in place (:meth:`~crawlherd._resilience.Retrier.call`): the owner waits for it.
A page whose items cannot be stored fails (its lease goes back), as any page that cannot be done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from crawlherd import metrics
from crawlherd._aio import first_of, retrieved, until_done
from crawlherd._resilience import Batcher, Retrier, Stopped
from crawlherd.crawler import Crawler, CrawlerRunConfig
from crawlherd.crawler.concurrency import MemoryAdaptiveDispatcher, RateLimiter, SemaphoreDispatcher
from crawlherd.crawler.concurrency.base import Dispatcher
from crawlherd.errors import BackendUnavailableError, FetchError, JobError, RetryLater
from crawlherd.extract.handlers import run_extractor
from crawlherd.extract.rules import Page
from crawlherd.extract.selectors import call_for_page
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.gate import SendStamps
from crawlherd.fetch.robots import SharedRobots
from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.frontier.base import enqueue_each
from crawlherd.item import Item
from crawlherd.request import Request
from crawlherd.result import CrawlResult
from crawlherd.sessions import open_sessions
from crawlherd.sinks import DETAIL_AT, Sink
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.details import DetailLedger, RunKey
from crawlherd.worker.grouped import GroupedWrites
from crawlherd.worker.jobcrawl import (
    DETAIL_META,
    MARKER_HOST,
    MARKER_META,
    DetailPage,
    ListingOutcome,
    ListingState,
    detail_requests,
)
from crawlherd.worker.options import WorkerOptions, WorkerStats
from crawlherd.worker.runs import RunStore
from crawlherd.worker.screenshots import keep_screenshot
from crawlherd.worker.sessions import SessionPool

__all__ = ["PagePipeline", "default_browser"]

log = logging.getLogger(__name__)

#: Seconds before a page put back by a service's outage is leased again.
_OUTAGE_RETRY = 1.0


def default_browser(limits: FetchLimits) -> Crawler:
    """The browser crawler of a website that needs one: Playwright with the system Chromium."""
    from crawlherd.fetch.browser import BrowserFetcher

    return Crawler(fetcher=BrowserFetcher(limits=limits))


class PagePipeline:
    """The pages of worker ``name``: :meth:`open` the frontier and the HTTP crawler, :meth:`run` the
    page loop until told to stop, :meth:`queue_listing` a job's first page. ``chains`` holds the
    listing chains of the jobs the worker owns, by run (where their outcome is reported); ``stats``,
    ``runs``, ``sink`` and ``retrier`` are the worker's."""

    #: The pages' items, stored together (group commit; made on first use, see _store).
    _writes: GroupedWrites | None = None
    #: The jobs' markers, queued together (see mark).
    _marks: Batcher[Request, bool] | None = None
    #: Each crawler's run config with the robots setting flipped, by crawler (see _run_config).
    _flipped: dict[int, tuple[CrawlerRunConfig, CrawlerRunConfig]] | None = None

    def __init__(
        self,
        options: WorkerOptions,
        *,
        name: str,
        stats: WorkerStats,
        runs: RunStore,
        details: DetailLedger,
        sink: Sink,
        retrier: Retrier,
        browser_factory: Callable[[FetchLimits], Crawler] | None = None,
    ) -> None:
        self.options = options
        self.name = name
        self.stats = stats
        self._http: Crawler | None = None
        self._browser_factory = browser_factory or default_browser
        self.runs = runs
        self.details = details
        self.sink = sink
        self.retrier = retrier
        self._browser: Crawler | None = None
        self._browser_lock = asyncio.Lock()
        self.frontier: Frontier | None = None
        self.chains: dict[str, asyncio.Future[ListingOutcome]] = {}
        self._new_pages = asyncio.Event()
        self._stop: asyncio.Event | None = None  # the page loop's, while it runs
        #: The websites' sessions and proxy health, in the frontier's store (see worker/sessions.py).
        self.sessions: SessionPool | None = None

    @property
    def opened(self) -> bool:
        return self._http is not None

    async def open(self) -> None:
        lease = {} if self.options.lease_timeout is None else {"lease_timeout": self.options.lease_timeout}
        self.frontier = await open_scheduler(self.options.frontier_url, **lease).__aenter__()
        self._http = http = self._share_gate(await Crawler(limits=self.options.limits).__aenter__())
        store = await open_sessions(self.options.frontier_url).__aenter__()
        self.sessions = SessionPool(store, send=lambda r: http.fetcher.fetch_result(r))

    def _share_gate(self, crawler: Crawler) -> Crawler:
        """A frontier shared by processes (Redis) keeps each host's delay at the moment of sending,
        across the fleet: the crawler's send gate asks it (:meth:`HostGate.share`); and the robots.txt
        files one worker read, so that the others do not fetch them again (:meth:`RobotsCache.share`)."""
        crawler.gate.share(self.frontier if isinstance(self.frontier, SendStamps) else None)
        crawler.robots.share(self.frontier if isinstance(self.frontier, SharedRobots) else None)
        return crawler

    async def close(self) -> None:
        if self._writes is not None:
            await self._writes.close()
            self._writes = None
        if self._marks is not None:
            await self._marks.close()
            self._marks = None
        await self.details.close()
        for crawler in (self._http, self._browser):
            if crawler is not None:
                await crawler.close()
        self._http = self._browser = None
        if self.sessions is not None:
            await self.sessions.store.close()
            self.sessions = None
        if self.frontier is not None:
            await self.frontier.close()
            self.frontier = None

    async def idle(self) -> bool:
        """No page queued or in flight in the frontier."""
        return self.frontier is None or await self.frontier.idle()

    async def queue_listing(self, site: SiteSpec, request: Request) -> None:
        """Queue a job's first listing page (the website's politeness set first) and wake the loop."""
        frontier = self._open_frontier()
        await self._politeness(site, request.host, request.url)
        if not await frontier.enqueue_request(request):
            raise JobError(f"the frontier refused listing page {request.url}")
        self._new_pages.set()

    async def mark(self, marker: Request) -> bool:
        """Queue a job's marker (:func:`~crawlherd.worker.jobcrawl.marker_request`): True the first time,
        and again only when the frontier has lost it (then with everything else it held)."""
        self._open_frontier()
        if self._marks is None:  # the markers of the jobs polling at the same moment: one frontier call
            self._marks = Batcher(self._enqueue_marks, max_batch=500, name="crawlherd-job-markers")
        return await self._marks(marker)

    def _open_frontier(self) -> Frontier:
        """The frontier, for the calls a job makes (:meth:`queue_listing`, :meth:`mark`). Closed under a job
        that still runs (a stop aborted by a second Ctrl+C), an outage: the job goes back to the broker, no
        traceback."""
        if self.frontier is None:
            raise BackendUnavailableError("the worker's frontier is closed: the worker is stopping", role="frontier")
        return self.frontier

    async def _enqueue_marks(self, markers: list[Request]) -> list[bool | BaseException]:
        frontier = self._open_frontier()
        flags = await enqueue_each(frontier, markers)
        if any(flag is True for flag in flags):
            await frontier.set_host_policy(MARKER_HOST, delay=0.0, max_in_flight=64)  # no politeness to keep
            self._new_pages.set()
        return flags

    async def frontier_counts(self) -> dict[str, Any]:
        """The frontier's counts, for the heartbeat (and the console's Frontier page)."""
        if self.frontier is None:
            return {}
        st = await self.frontier.stats()
        metrics.FRONTIER.labels(state="queued").set(st.queued)
        metrics.FRONTIER.labels(state="in_flight").set(st.in_flight)
        counts: dict[str, Any] = {"frontier": st.summary()}  # with each host's politeness state
        if self.sessions is not None and self.sessions.sites:
            counts["sessions"] = await self.sessions.summary()  # the websites' sessions and proxies
        return counts

    # -- the page loop ----------------------------------------------------------------------------

    def _dispatcher(self, limiter: RateLimiter) -> Dispatcher:
        if self.options.page_dispatcher == "memory-adaptive":
            return MemoryAdaptiveDispatcher(max_session_permit=self.options.page_concurrency, rate_limiter=limiter)
        return SemaphoreDispatcher(self.options.page_concurrency, rate_limiter=limiter)

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch the frontier's pages, listing and detail, until ``stop``; between bursts, wait for
        new ones (or poll: other workers sharing the frontier queue some too, and expired leases
        come back). The frontier gone: said once, tried again with back-off."""
        assert self.frontier is not None
        frontier = self.frontier
        limiter = RateLimiter(base_delay=(0.0, 0.0), decay=0.5)  # 429 back-off; spacing is the frontier's
        # one dispatcher for every run: what a run could not put back (the frontier unavailable), the next does
        dispatcher = self._dispatcher(limiter)
        attempts = self.retrier.attempts("frontier", stop=stop)
        stopping = asyncio.ensure_future(stop.wait())
        self._stop = stop
        try:
            while not stop.is_set():
                try:
                    if attempts.failures:  # still down? (the frontier answers, or this raises the same)
                        await frontier.idle()
                        attempts.succeeded()
                    await self._run_pages(frontier, dispatcher, stopping)
                except Stopped:
                    return
                except Exception as exc:  # the frontier went away: wait, go on
                    unavailable = _unavailable_in(exc)
                    if unavailable is None:
                        raise
                    try:
                        await attempts.failed(unavailable)
                    except Stopped:
                        return
                    continue
                self._new_pages.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await first_of(stop.wait(), self._new_pages.wait())
        finally:
            self._stop = None
            stopping.cancel()

    async def _run_pages(self, frontier: Frontier, dispatcher: Dispatcher, stopping: asyncio.Future[Any]) -> None:
        """One run of the engine's dispatcher over the frontier, until it has nothing more or ``stopping``
        is done (then what is in flight is cancelled and its leases go back)."""
        results = dispatcher.run(frontier, self._page)
        try:
            async for result in until_done(results, stopping):
                if not result.success:
                    await self._page_failed(result)
        finally:
            await results.aclose()  # type: ignore[attr-defined]

    # -- one page ---------------------------------------------------------------------------------

    async def _page(self, request: Request) -> CrawlResult:
        """The dispatcher's work for one page: fetch it *and* store what it holds, so that the lease is
        acked only once that is done (a worker stopped or killed in between loses nothing: the lease
        comes back, and storing again is idempotent). A service's outage meanwhile (the frontier, the
        config DB, the sink) is not the page's failure: it goes back to the frontier (RetryLater), and
        a listing page so keeps its job's chain going."""
        try:
            return await self._page_work(request)
        except BackendUnavailableError as exc:
            log.debug("worker %s: page %s put back: %s unavailable: %s", self.name, request.url, exc.role, exc)
            raise RetryLater(f"{exc.role} unavailable", delay=_OUTAGE_RETRY) from exc

    async def _page_work(self, request: Request) -> CrawlResult:
        if MARKER_META in request.meta:  # a job's marker: nothing to fetch
            return CrawlResult(url=request.url, success=True, request=request)
        listing = ListingState.of(request)
        if listing is not None:
            return await self._listing_page(request, listing)
        detail = DetailPage.of(request)
        crawler = await self._crawler_for(detail is not None and detail.site.requires_playwright)
        site = detail.site if detail is not None else None
        result = await self._fetch(crawler, request, site)
        metrics.observe_fetch(result)
        if result.success and detail is not None:
            await self._store_detail(result, detail)
        return result

    async def _fetch(self, crawler: Crawler, request: Request, site: SiteSpec | None) -> CrawlResult:
        """Fetch a page: under one of its website's sessions when its fetch profile asks for them (a block
        page is then fetched again through another session: RetryLater puts it back in the frontier)."""
        config = self._run_config(crawler, site)
        if site is None or not site.fetch.sessions_on or self.sessions is None:
            return await crawler.arun(request, config)
        return await self.sessions.fetch(site, request, lambda r: crawler.arun(r, config))

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

    async def _politeness(self, site: SiteSpec, host: str, url: str, *, raise_only: bool = False) -> None:
        """The website's politeness as the frontier's policy for ``host`` (``url``: a page of it): its
        ``min_delay``, or robots.txt's Crawl-delay when the website obeys robots.txt and that is longer.
        The policy is the fleet's (a shared frontier): set without the Crawl-delay, it would lower the
        host's delay for every worker -- so robots.txt is read first (from this process's cache, the one
        the other workers share, or fetched). ``raise_only``: set it only when the Crawl-delay raises it
        (a listing page just fetched, robots.txt read for it)."""
        assert self.frontier is not None
        delay = site.politeness.min_delay
        if site.politeness.robots == "obey":
            # the crawler that fetched the page (raise_only), else one that is open: a browser is not
            # started for this
            crawler = (self._browser if site.requires_playwright else None) or self._http
            assert crawler is not None
            if not raise_only:
                with contextlib.suppress(FetchError):  # unreadable: the page's own fetch says why
                    await crawler.robots.load(url)
            robots_delay = crawler.robots.crawl_delay(url)
            if robots_delay and robots_delay > delay:
                delay = robots_delay
            elif raise_only:
                return
        elif raise_only:
            return
        await self.frontier.set_host_policy(host, delay=delay, max_in_flight=site.politeness.max_concurrency)

    async def _listing_page(self, request: Request, state: ListingState) -> CrawlResult:
        """One listing page of a chain: fetch, extract, store the new items, queue their detail pages
        and the next listing page -- or, on the last page, report the chain's outcome."""
        assert self.frontier is not None
        if state.owner == self.name and state.run not in self.chains:
            # This worker owned the job and gave it up (failed, or stopped): the page is not wanted.
            return CrawlResult(url=request.url, success=False, error_message="its job run has ended", request=request)
        job = state.job
        site = job.site
        crawler = await self._crawler_for(site.requires_playwright)
        result = await self._fetch(crawler, request, site)
        metrics.observe_fetch(result)
        if not result.success:
            return result  # reported by _page_failed once the dispatcher settled it (a 429 is re-fetched first)
        await self._politeness(site, request.host, request.url, raise_only=True)
        page = Page(
            url=result.final_url or request.url, html=result.text, website=site.name, status=result.status_code or 0
        )
        extraction = await run_extractor(site.extractor(), page)
        seen = set(state.seen)
        new: dict[bytes, Item] = {}
        for item in extraction.items:
            if item.fingerprint.hex() not in seen:
                new.setdefault(item.fingerprint, item)
        details = detail_requests(job, new.values())
        # The detail hosts' politeness first: a frontier that fails here has nothing to undo. Failing
        # between the write below and the queueing, it left rows "out" with no page of this run behind
        # them; read again, the page found them there, took their (duplicate) pages for queued by the
        # first reading, and the job waited for them until details_stall.
        for host, url in {r.host: r.url for r in details}.items():
            await self._politeness(site, host, url)
        run = (job.target_id, job.slot_at)
        expected = {r.meta[DETAIL_META]["item"]: r for r in details}

        async def store_and_queue() -> tuple[Any, int]:
            # the items and the detail pages' rows in one write (group-committed with the other pages')
            counts, fresh = await self._grouped().store_listing(
                list(new.values()), website_id=job.website_id, target_id=job.target_id, run=run,
                details=list(expected))
            return counts, (await self._queue_details(run, expected, fresh) if details else 0)

        # Shielded: a page cancelled meanwhile (its run of the dispatcher ended: the frontier failed
        # under other pages) would have its group-committed write go through with no queueing after it
        # -- rows "out" with no page behind them, held by the next reading for duplicates it queued.
        # Run to its end, the write is followed by the queueing or by the rows' removal.
        writing = asyncio.ensure_future(store_and_queue())
        writing.add_done_callback(retrieved)
        counts, queued = await asyncio.shield(writing)
        after = state.next(new=new.values(), items_new=counts.new, items_updated=counts.updated, details_queued=queued)
        paginator = site.paginator
        url = request.url
        nxt = await call_for_page(
            result.text, paginator.next_url, url, pages_fetched=state.page, html=result.text, new_items=len(new)
        )
        if nxt is None and paginator.type == "next_link" and state.page < paginator.max_pages:
            nxt = extraction.next_url
        if nxt is not None and nxt != url:
            if await self.frontier.enqueue_request(after.request(nxt)):
                self._new_pages.set()
            # else: this page was read before (its lease came back): that reading carries the chain on
            return result
        outcome = ListingOutcome(
            pages=state.page,
            items_new=after.items_new,
            items_updated=after.items_updated,
            details_queued=after.details_queued,
        )
        await self._report(state, outcome)  # cancelled at shutdown: the lease goes back
        return result

    async def _queue_details(self, run: RunKey, items: dict[str, Request], fresh: set[str]) -> int:
        """Queue a listing page's detail pages (``items``: by item), each with its row in ``job_details``
        written first (``fresh``: the rows that are new; see :mod:`crawlherd.worker.details`); how many
        the frontier queued. A fresh row whose page the frontier did not queue (queued in this revisit
        period already, by another run) is removed."""
        assert self.frontier is not None
        fresh_items = [i for i in items if i in fresh]
        frontier = self.frontier
        flags: list[bool | BaseException] = [False] * len(fresh_items)
        try:
            held = [r for i, r in items.items() if i not in fresh]
            queued = await frontier.enqueue_requests(held) if held else 0
            # one call for them all where the backend can, answering which it refused
            flags = await enqueue_each(frontier, [items[i] for i in fresh_items])
            failed = next((f for f in flags if isinstance(f, BaseException)), None)
            if failed is not None:
                raise failed
        except BaseException:
            # The fresh rows of pages not known to be queued (the frontier failed) go, so that reading this
            # page again decides anew (a row kept with no page behind it would hold the job until
            # details_stall); those queued stay: their pages settle them.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.details.forget(run, [i for i, ok in zip(fresh_items, flags, strict=True)
                                                               if ok is not True]))
            raise
        await self.details.forget(run, [i for i, ok in zip(fresh_items, flags, strict=True) if ok is not True])
        return queued + sum(1 for ok in flags if ok is True)

    async def _page_failed(self, result: CrawlResult) -> None:
        """A page the dispatcher gave up on: a listing page fails its job; a detail page is counted
        (the listing's fields are kept; the revisit period brings it back)."""
        request = result.request
        state = ListingState.of(request) if request is not None else None
        shot = await self._keep_screenshot(result, state)
        if state is None:
            self.stats.detail_failures += 1
            why = f"detail page {result.url}: {result.error_message or result.status_code}{shot}"
            self.stats.remember(why)
            detail = DetailPage.of(request) if request is not None else None
            if detail is not None:  # settled, failed with its reason: its runs stop waiting for it
                settle = self.details.settle
                await self.retrier.call(lambda: settle(detail.item, why), role="database", stop=self._stop)
            return
        if state.owner == self.name and state.run not in self.chains:
            return  # its job run has ended
        robots = result.error_type == "RobotsDisallowedError"
        reason = f"listing page {result.url} failed: {result.error_message or result.status_code}{shot}"
        if result.error_type == "BlockedError":  # the message starts "blocked: ..." and says why
            reason = f"{result.error_message} (listing page {result.url}){shot}"
        outcome = ListingOutcome(  # what the pages before it stored counts, as a success's would
            pages=state.page - 1, items_new=state.items_new, items_updated=state.items_updated,
            error=reason, permanent=robots,
        )
        await self._report(state, outcome, stop=self._stop)  # Stopped at shutdown: the loop ends

    async def _keep_screenshot(self, result: CrawlResult, state: ListingState | None) -> str:
        """Keep the failed page's screenshot when its website asks (``failure_screenshots``); what to add
        to the failure's message ("" when none was kept)."""
        if not result.screenshot or result.request is None:
            return ""
        detail = DetailPage.of(result.request) if state is None else None
        site = state.job.site if state is not None else detail.site if detail is not None else None
        if site is None or not site.browser.failure_screenshots:
            return ""
        path = await keep_screenshot(self.options.screenshot_dir, site.name, result)
        return f" (screenshot: {path})" if path is not None else ""

    async def _report(self, state: ListingState, outcome: ListingOutcome, *, stop: asyncio.Event | None = None) -> None:
        """Tell the job's owner how its listing chain ended: in process, or through ``job_runs`` (the
        config DB down: retried until it is back, or until ``stop``)."""
        chain = self.chains.get(state.run)
        if chain is not None:
            if not chain.done():
                chain.set_result(outcome)
            return
        if state.owner != self.name:
            report = self.runs.report
            await self.retrier.call(lambda: report(state.job, worker=state.owner, outcome=outcome),
                                    role="database", stop=stop)

    async def _store_detail(self, result: CrawlResult, detail: DetailPage) -> None:
        rules = detail.site.detail_rules
        found: dict[str, object] = {}
        if rules is not None:
            found = await call_for_page(result.text, rules.extract_detail, result.text, result.final_url or result.url)
        fields = {**detail.fields, **{k: v for k, v in found.items() if v not in (None, "", [])}}
        now = datetime.now(UTC)
        fields[DETAIL_AT] = now.isoformat()
        item = Item(website=detail.site.name, url=result.url, fingerprint=bytes.fromhex(detail.item), fields=fields)
        # a detail page completes its item: counted as a detail page, not as an item again; its page
        # settled with it, before the ack (a page not settled is fetched again)
        await self._grouped().store_detail(item, website_id=detail.website_id, target_id=detail.target_id)
        metrics.DETAIL_PAGES.inc()
        self.stats.detail_pages += 1

    def _grouped(self) -> GroupedWrites:
        if self._writes is None:
            self._writes = GroupedWrites(self.sink, ledger=self.details)
        return self._writes

    async def _crawler_for(self, browser: bool) -> Crawler:
        if not browser:
            assert self._http is not None
            return self._http
        async with self._browser_lock:
            if self._browser is None:  # started on first need; BrowserUnavailableError fails the job
                self._browser = self._share_gate(await self._browser_factory(self.options.limits).__aenter__())
            return self._browser


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
