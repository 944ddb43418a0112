"""``Crawler``: the library API of the crawl engine.

::

    async with Crawler(allow_private_addresses=False) as crawler:
        result = await crawler.arun("https://example.com/")
        results = await crawler.arun_many(urls, dispatcher=SemaphoreDispatcher(16))
        async for result in await crawler.arun_many(urls, config=CrawlerRunConfig(stream=True)):
            ...
        async for result in await crawler.crawl(["https://example.com/"], max_pages=100, max_depth=2):
            ...

Every URL given yields exactly one :class:`~crawlherd.result.CrawlResult`; a URL that cannot be
fetched (or is not even a URL) gives a failed result, never an exception that ends the batch.
``arun_many`` and ``crawl`` run their requests through a frontier (``memory://`` by default) and a
dispatcher, so politeness, re-fetches and memory-pressure re-queues all go through one path.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterable
from typing import Literal, TypedDict, Unpack, cast, overload
from urllib.parse import urlsplit

from crawlherd._aio import AsyncClosing
from crawlherd.clock import Clock, SystemClock
from crawlherd.crawler.cache import DEFAULT_CACHE_MAX_BYTES, DEFAULT_CACHE_MAX_ENTRIES, ResultCache
from crawlherd.crawler.concurrency.base import BaseDispatcher, Dispatcher
from crawlherd.crawler.concurrency.rate_limiter import RateLimiter
from crawlherd.crawler.concurrency.semaphore import SemaphoreDispatcher
from crawlherd.crawler.config import CrawlerRunConfig
from crawlherd.crawler.follow import follow_links
from crawlherd.crawler.plan import failed, plan_many, run_request
from crawlherd.crawler.renderer import Renderer, wants_rendering
from crawlherd.crawler.robots_work import RobotsWork
from crawlherd.crawler.run_urls import RunUrlsAdapter, RunUrlsDispatcher
from crawlherd.crawler.stream import CrawlRun, CrawlStream
from crawlherd.errors import ConfigurationError, FetchError, InvalidURLError
from crawlherd.fetch.base import Fetcher, FetchLimits
from crawlherd.fetch.gate import HostGate
from crawlherd.fetch.robots import RobotsCache, is_robots_request
from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.frontier.memory import MemoryFrontier
from crawlherd.frontier.options import FrontierOptions
from crawlherd.request import Request
from crawlherd.result import CrawlResult

__all__ = ["AsyncWebCrawler", "Crawler", "RunUrlsDispatcher", "runs_urls_itself"]

log = logging.getLogger(__name__)

#: What a fetcher must have (the Fetcher protocol's members): checked once, when the crawler takes it.
_FETCHER_MEMBERS = ("send_gate", "takes_screenshots", "limits", "fetch", "fetch_result", "close", "__aenter__")


class _ManyOptions(TypedDict, total=False):
    """The keyword options of :meth:`Crawler.arun_many` besides ``stream`` (for its overloads)."""

    urls: Iterable[str | Request] | None
    dispatcher: Dispatcher | RunUrlsDispatcher | None
    config: CrawlerRunConfig | None


class _CrawlOptions(TypedDict, total=False):
    """The keyword options of :meth:`Crawler.crawl` besides the budget and ``stream``."""

    dispatcher: Dispatcher | None
    config: CrawlerRunConfig | None
    allowed_domains: Iterable[str] | None
    frontier: str | Frontier
    delay: float
    max_in_flight_per_host: int


class Crawler(AsyncClosing):
    """The crawl engine. ``Crawler(*, fetcher=None, limits=None, allow_private_addresses=None,
    config=None, clock=None, max_connections=100, cache_max_entries=1000, cache_max_bytes=64 MiB)``;
    use it as ``async with Crawler() as crawler``.

    Without ``fetcher`` an :class:`~crawlherd.fetch.http.HttpFetcher` is made from ``limits`` (and
    ``allow_private_addresses``), and the requests that ask for a screenshot or page actions are
    rendered by a browser (:mod:`crawlherd.crawler.renderer`), as crawl4ai's are. A fetcher passed in
    (``BrowserFetcher``, a ``MockFetcher``...) is
    taken over: the crawler enters it and closes it, as httpx does with a transport, and sets its
    ``send_gate`` to the crawler's :class:`~crawlherd.fetch.gate.HostGate` (:attr:`gate`), which keeps
    per-host spacing at the moment requests leave.

    ``cache_mode="enabled"`` / ``"refresh"`` runs keep results in a :class:`~crawlherd.crawler.cache.ResultCache`
    of at most ``cache_max_entries`` results and ``cache_max_bytes`` of bodies (least recently used out first).
    """

    def __init__(
        self,
        *,
        fetcher: Fetcher | None = None,
        limits: FetchLimits | None = None,
        allow_private_addresses: bool | None = None,
        config: CrawlerRunConfig | None = None,
        clock: Clock | None = None,
        max_connections: int = 100,
        cache_max_entries: int = DEFAULT_CACHE_MAX_ENTRIES,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
    ) -> None:
        if fetcher is not None and (limits is not None or allow_private_addresses is not None):
            raise ConfigurationError("pass either fetcher= or limits=/allow_private_addresses=, not both")
        self._renderer: Renderer | None = None
        if fetcher is None:
            from crawlherd.fetch.http import HttpFetcher

            limits = limits or FetchLimits()
            if allow_private_addresses is not None:
                limits = dataclasses.replace(limits, allow_private_addresses=allow_private_addresses)
            fetcher = HttpFetcher(limits, max_connections=max_connections)
            self._renderer = Renderer(limits)
        missing = [name for name in _FETCHER_MEMBERS if not hasattr(fetcher, name)]
        if missing:
            raise ConfigurationError(
                f"{type(fetcher).__name__} has no {', '.join(missing)}: a fetcher must implement the Fetcher "
                "protocol (crawlherd.fetch.base), send gate included"
            )
        self.fetcher: Fetcher = fetcher
        self.config = config or CrawlerRunConfig()
        self.clock: Clock = clock or SystemClock()
        self.robots = RobotsCache(fetcher, clock=self.clock)
        #: Per-host spacing at send time: the running crawls' delay, robots.txt's, the rate limiters'.
        self.gate = HostGate(clock=self.clock)
        self.robots_work = RobotsWork(self.robots, self.gate, self.clock)
        fetcher.send_gate = self.gate
        self._cache = ResultCache(cache_max_entries, cache_max_bytes)
        self._streams: set[CrawlStream] = set()
        self._warned_screenshot: set[str] = set()

    async def __aenter__(self) -> Crawler:
        await self.fetcher.__aenter__()
        return self

    async def close(self) -> None:
        """Stop every open stream and close the fetcher. Idempotent."""
        for stream in list(self._streams):
            await stream.aclose()
        await self.fetcher.close()
        if self._renderer is not None:
            await self._renderer.close()

    # -- one URL ------------------------------------------------------------------------------------

    async def arun(self, url_or_request: str | Request, config: CrawlerRunConfig | None = None) -> CrawlResult:
        """Fetch one URL (no frontier, no dispatcher): its result, failed or not."""
        config = config or self.config
        self._check_screenshot(config)
        run = CrawlRun(cast(Frontier, _NoFrontier()), config)
        try:
            request = run_request(url_or_request, run)
        except InvalidURLError as exc:
            return failed(str(url_or_request), exc)
        return await self._process(run, request)

    def _check_screenshot(self, config: CrawlerRunConfig) -> None:
        """Say once per fetcher that a screenshot was asked of a fetcher that cannot take one."""
        if not config.screenshot or self.fetcher.takes_screenshots or self._renderer is not None:
            return
        name = type(self.fetcher).__name__
        if name not in self._warned_screenshot:
            self._warned_screenshot.add(name)
            log.warning(
                "CrawlerRunConfig(screenshot=True): %s does not render pages and cannot take screenshots; "
                "results will have screenshot=None. Use Crawler(fetcher=BrowserFetcher()) "
                "(pip install 'crawlherd[browser]') for screenshots.",
                name,
            )

    async def _process(self, run: CrawlRun, request: Request) -> CrawlResult:
        config = run.config
        cache_mode = config.cache_mode
        if is_robots_request(request):
            return await self.robots_work.fetch(request, run)
        try:
            if config.check_robots_txt:
                await self.robots_work.check(request, run)
            if cache_mode in ("enabled", "read_only"):
                hit = self._cache.get(request.fingerprint)
                if hit is not None:
                    return dataclasses.replace(hit, url=request.url, request=request, dispatch=None)
        except FetchError as exc:
            return failed(request.url, exc, request)
        session = run.session
        try:
            fetcher = self.fetcher
            if self._renderer is not None and wants_rendering(request):
                fetcher = await self._renderer.fetcher(self.gate)
            if session is None:
                result = await fetcher.fetch_result(request)
            else:  # a User-Agent, cookies or proxies for the run (crawler/proxies.py)
                result = await fetcher.fetch_result(await session.attach(request))
                session.keep(result.cookies)
                result.request = request  # the session (a proxy's credentials) stays out of the result
        except FetchError as exc:
            self.gate.answered(request.host)
            return failed(request.url, exc, request)
        self.gate.answered(request.host)
        if cache_mode in ("enabled", "refresh") and result.success:
            self._cache.put(request.fingerprint, result)
        if run.max_depth >= 0 and result.success:
            await follow_links(result, request, run, self.robots_work)
        return result

    # -- many URLs ------------------------------------------------------------------------------------

    @overload
    async def arun_many(
        self, urls_or_requests: Iterable[str | Request] | None = ..., *, stream: Literal[False],
        **options: Unpack[_ManyOptions],
    ) -> list[CrawlResult]: ...

    @overload
    async def arun_many(
        self, urls_or_requests: Iterable[str | Request] | None = ..., *, stream: Literal[True],
        **options: Unpack[_ManyOptions],
    ) -> CrawlStream: ...

    @overload
    async def arun_many(
        self, urls_or_requests: Iterable[str | Request] | None = ..., *, stream: bool | None = ...,
        **options: Unpack[_ManyOptions],
    ) -> list[CrawlResult] | CrawlStream: ...

    async def arun_many(
        self,
        urls_or_requests: Iterable[str | Request] | None = None,
        *,
        urls: Iterable[str | Request] | None = None,
        dispatcher: Dispatcher | RunUrlsDispatcher | None = None,
        config: CrawlerRunConfig | None = None,
        stream: bool | None = None,
    ) -> list[CrawlResult] | CrawlStream:
        """Fetch every URL: a list of results, or with ``stream=True`` (or ``config.stream``) an async
        iterator in completion order. Exactly one result per item given, in the same number -- an
        invalid URL gives a failed result, a repeated URL is fetched once and answered for each time.
        The URLs come positionally or as ``urls=`` (crawl4ai's spelling).

        ``dispatcher`` defaults to ``SemaphoreDispatcher(config.concurrency)``. A dispatcher written as
        crawl4ai documents one -- a subclass of :class:`~crawlherd.crawler.concurrency.base.BaseDispatcher` (or any
        object) with ``run_urls(urls, crawler, config)`` and ``crawl_url(...)`` calling
        ``self.crawler.arun(url, config=config)`` -- plugs in too: it is handed the URLs and this
        crawler (``run_urls_stream`` is used when streaming, if it has one)."""
        config = config or self.config
        items = _the_urls(urls_or_requests, urls)
        self._check_screenshot(config)
        use_stream = config.stream if stream is None else stream
        chosen = self._dispatcher(dispatcher, config, use_stream)
        frontier = MemoryFrontier(FrontierOptions(clock=self.clock, max_in_flight=1_000_000))
        run = CrawlRun(frontier, config)
        # Every URL is validated and deduplicated before the first fetch; the requests are made as the
        # dispatcher pulls them (MemoryFrontier.enqueue_lazily).
        plan = plan_many(items, run)
        if plan.plain:
            await frontier.enqueue_lazily(plan.requests(run), len(plan.urls))
        else:
            await frontier.enqueue_requests(plan.requests(run))
        if chosen.monitor is not None:
            chosen.monitor.add_queued(len(plan.urls))
        out = self._stream(run, chosen, plan.invalid)
        if use_stream:
            return out
        async with out:
            return [r async for r in out]

    def _dispatcher(
        self, dispatcher: Dispatcher | RunUrlsDispatcher | None, config: CrawlerRunConfig, stream: bool
    ) -> Dispatcher:
        """The dispatcher of an ``arun_many``: the one given (a crawl4ai-style one adapted), else a
        ``SemaphoreDispatcher(config.concurrency)``."""
        if dispatcher is None:
            return SemaphoreDispatcher(config.concurrency)
        if runs_urls_itself(dispatcher):
            return RunUrlsAdapter(cast(RunUrlsDispatcher, dispatcher), self, config, stream=stream)
        return cast(Dispatcher, dispatcher)

    def _stream(self, run: CrawlRun, dispatcher: Dispatcher, first: list[CrawlResult]) -> CrawlStream:
        return CrawlStream(
            run, dispatcher, first, process=functools.partial(self._process, run), gate=self.gate,
            clock=self.clock, registry=self._streams,
        )

    # -- following links ------------------------------------------------------------------------------

    @overload
    async def crawl(
        self, seeds: Iterable[str | Request], *, max_pages: int, max_depth: int, stream: Literal[True] = ...,
        **options: Unpack[_CrawlOptions],
    ) -> CrawlStream: ...

    @overload
    async def crawl(
        self, seeds: Iterable[str | Request], *, max_pages: int, max_depth: int, stream: Literal[False],
        **options: Unpack[_CrawlOptions],
    ) -> list[CrawlResult]: ...

    async def crawl(
        self,
        seeds: Iterable[str | Request],
        *,
        max_pages: int,
        max_depth: int,
        allowed_domains: Iterable[str] | None = None,
        stream: bool = True,
        dispatcher: Dispatcher | None = None,
        config: CrawlerRunConfig | None = None,
        frontier: str | Frontier = "memory://",
        delay: float = 1.0,
        max_in_flight_per_host: int = 2,
    ) -> CrawlStream | list[CrawlResult]:
        """Crawl from ``seeds``, following ``<a href>`` links up to ``max_depth`` (seeds are depth 0)
        until ``max_pages`` pages were queued. Shallower pages first (priority ``-depth``).

        ``allowed_domains``: host names whose pages (and subdomains') are followed; None means the
        seeds' own hosts, ``["*"]`` anything. ``frontier``: a frontier URL (``memory://``,
        ``sqlite:///crawl.db``, ``redis://...``; opened and closed here) or an open Frontier (used,
        not closed). ``delay`` and ``max_in_flight_per_host``: the frontier's per-host politeness
        (robots.txt's Crawl-delay raises it for its host). ``dispatcher`` defaults to a
        ``SemaphoreDispatcher(config.concurrency)`` with a ``RateLimiter`` that adds no spacing of its
        own but re-fetches 429/503 answers after their back-off.
        """
        _check_budget(max_pages, max_depth, delay)
        config = config or self.config
        if dispatcher is None:
            dispatcher = SemaphoreDispatcher(
                config.concurrency, rate_limiter=RateLimiter(base_delay=(0.0, 0.0), clock=self.clock)
            )
        owns = isinstance(frontier, str)
        sched: Frontier = (
            open_scheduler(frontier, clock=self.clock, delay=delay, max_in_flight=max_in_flight_per_host)
            if isinstance(frontier, str)
            else frontier
        )
        run = CrawlRun(sched, config)
        run.base_delay = delay
        run.max_pages = max_pages
        run.max_depth = max_depth
        try:
            invalid, hosts, robots_queued = await self._seed(seeds, run)
        except BaseException:
            if owns:
                await sched.close()
            raise
        domains = [d.lower().lstrip(".") for d in allowed_domains] if allowed_domains is not None else hosts
        run.allowed = None if "*" in domains else frozenset(domains)
        if dispatcher.monitor is not None:
            dispatcher.monitor.add_queued(run.enqueued + robots_queued)
        run.owns_frontier = owns
        run.monitor = dispatcher.monitor
        run.gate_delay = delay
        self.gate.hold(delay)
        run.share(self.gate, self.robots)  # a frontier other processes may share: see CrawlRun.share
        out = self._stream(run, dispatcher, invalid)
        if stream:
            return out
        async with out:
            return [r async for r in out]

    async def _seed(self, seeds: Iterable[str | Request], run: CrawlRun) -> tuple[list[CrawlResult], list[str], int]:
        """Queue a crawl's seeds (depth 0, up to ``max_pages``; robots.txt first when obeyed): the failed
        results of invalid ones, the seeds' host names, and the robots.txt work queued."""
        invalid: list[CrawlResult] = []
        hosts: list[str] = []
        robots_queued = 0
        for seed in seeds:
            try:
                request = run_request(seed, run, priority=0, depth=0)
            except InvalidURLError as exc:
                invalid.append(failed(str(seed), exc))
                continue
            hosts.append(urlsplit(request.canonical_url).hostname or "")
            if run.enqueued < run.max_pages:
                run.queued_elsewhere.add(request.fingerprint)
                robots_queued += await self.robots_work.queue(run, request)
                if await run.frontier.enqueue_request(request):
                    run.enqueued += 1
        return invalid, hosts, robots_queued


def _check_budget(max_pages: int, max_depth: int, delay: float) -> None:
    if max_pages < 1:
        raise ConfigurationError(f"max_pages={max_pages!r}: must be >= 1")
    if max_depth < 0:
        raise ConfigurationError(f"max_depth={max_depth!r}: must be >= 0")
    if delay < 0:
        raise ConfigurationError(f"delay={delay!r}: must be >= 0 seconds")


def _the_urls(
    urls_or_requests: Iterable[str | Request] | None, urls: Iterable[str | Request] | None
) -> Iterable[str | Request]:
    """``arun_many``'s URLs, given positionally or as ``urls=`` (crawl4ai's spelling), once."""
    if urls is not None:
        if urls_or_requests is not None:
            raise ConfigurationError("arun_many: pass the URLs once, positionally or as urls=, not both")
        urls_or_requests = urls
    if urls_or_requests is None:
        raise ConfigurationError("arun_many needs the URLs: arun_many([...]) or arun_many(urls=[...])")
    if isinstance(urls_or_requests, (str, Request)):
        raise ConfigurationError("arun_many takes a list of URLs or Requests; for one URL use arun()")
    return urls_or_requests


class _NoFrontier:
    """What arun() hands to robots' Crawl-delay hook: nothing to tell."""

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        return None

    async def block_host(self, host: str, until: float) -> None:
        return None



#: crawl4ai's name for the crawler: ``from crawlherd import AsyncWebCrawler``.
AsyncWebCrawler = Crawler


def runs_urls_itself(dispatcher: object) -> bool:
    """True for a dispatcher with its own ``run_urls`` (crawl4ai's custom dispatchers); False for
    crawlherd's own, which run a frontier's requests (:class:`~crawlherd.crawler.concurrency.base.Dispatcher`)."""
    method = getattr(type(dispatcher), "run_urls", None)
    return method is not None and method is not getattr(BaseDispatcher, "run_urls", None)
