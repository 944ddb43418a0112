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
from typing import Any, Literal, TypedDict, Unpack, cast, overload
from urllib.parse import urlsplit

from crawlherd.clock import Clock, SystemClock
from crawlherd.compat.crawl4ai import RunUrlsAdapter, RunUrlsDispatcher
from crawlherd.crawler.cache import DEFAULT_CACHE_MAX_BYTES, DEFAULT_CACHE_MAX_ENTRIES, ResultCache
from crawlherd.crawler.concurrency.base import BaseDispatcher, Dispatcher
from crawlherd.crawler.concurrency.rate_limiter import RateLimiter
from crawlherd.crawler.concurrency.semaphore import SemaphoreDispatcher
from crawlherd.crawler.config import CrawlerRunConfig
from crawlherd.crawler.stream import CrawlRun, CrawlStream
from crawlherd.errors import (
    ConfigurationError,
    CrawlherdError,
    FetchError,
    InvalidURLError,
    PageTooComplexError,
)
from crawlherd.extract.links import extract_links_async
from crawlherd.fetch.base import Fetcher, FetchLimits
from crawlherd.fetch.gate import HostGate
from crawlherd.fetch.robots import RobotsCache, is_robots_request, robots_request
from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.frontier.memory import MemoryFrontier
from crawlherd.frontier.options import FrontierOptions
from crawlherd.request import Request, plain_get
from crawlherd.result import CrawlResult

__all__ = ["AsyncWebCrawler", "Crawler", "RunUrlsDispatcher", "runs_urls_itself"]

log = logging.getLogger(__name__)

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", ""})
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


class Crawler:
    """The crawl engine. ``Crawler(*, fetcher=None, limits=None, allow_private_addresses=None,
    config=None, clock=None, max_connections=100, cache_max_entries=1000, cache_max_bytes=64 MiB)``;
    use it as ``async with Crawler() as crawler``.

    Without ``fetcher`` an :class:`~crawlherd.fetch.http.HttpFetcher` is made from ``limits`` (and
    ``allow_private_addresses``). A fetcher passed in (``BrowserFetcher``, a ``MockFetcher``...) is
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
        if fetcher is None:
            from crawlherd.fetch.http import HttpFetcher

            limits = limits or FetchLimits()
            if allow_private_addresses is not None:
                limits = dataclasses.replace(limits, allow_private_addresses=allow_private_addresses)
            fetcher = HttpFetcher(limits, max_connections=max_connections)
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
        fetcher.send_gate = self.gate
        self._cache = ResultCache(cache_max_entries, cache_max_bytes)
        self._streams: set[CrawlStream] = set()
        self._warned_screenshot: set[str] = set()

    async def __aenter__(self) -> Crawler:
        await self.fetcher.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop every open stream and close the fetcher. Idempotent."""
        for stream in list(self._streams):
            await stream.aclose()
        await self.fetcher.close()

    # -- one URL ------------------------------------------------------------------------------------

    async def arun(self, url_or_request: str | Request, config: CrawlerRunConfig | None = None) -> CrawlResult:
        """Fetch one URL (no frontier, no dispatcher): its result, failed or not."""
        config = config or self.config
        self._check_screenshot(config)
        run = CrawlRun(cast(Frontier, _NoFrontier()), config)
        try:
            request = self._request(url_or_request, run)
        except InvalidURLError as exc:
            return _failed(str(url_or_request), exc)
        return await self._process(request, run)

    def _request(self, item: str | Request, run: CrawlRun, **kw: Any) -> Request:
        meta = run.meta
        headers = run.config.headers
        if isinstance(item, Request):
            if meta or headers:
                return item.replace(meta={**item.meta, **meta}, headers={**headers, **item.headers})
            return item
        if not isinstance(item, str):
            raise InvalidURLError(f"expected a URL string or a Request, got {type(item).__name__}: {item!r:.100}")
        return Request(item, meta=meta or None, headers=headers or None, **kw)

    def _check_screenshot(self, config: CrawlerRunConfig) -> None:
        """Say once per fetcher that a screenshot was asked of a fetcher that cannot take one."""
        if not config.screenshot or self.fetcher.takes_screenshots:
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

    async def _process(self, request: Request, run: CrawlRun) -> CrawlResult:
        config = run.config
        cache_mode = config.cache_mode
        if is_robots_request(request):
            return await self._robots_work(request, run)
        try:
            if config.check_robots_txt:
                await self._robots(request, run)
            if cache_mode == "enabled":
                hit = self._cache.get(request.fingerprint)
                if hit is not None:
                    return dataclasses.replace(hit, url=request.url, request=request, dispatch=None)
        except FetchError as exc:
            return _failed(request.url, exc, request)
        try:
            result = await self.fetcher.fetch_result(request)
        except FetchError as exc:
            self.gate.answered(request.host)
            return _failed(request.url, exc, request)
        self.gate.answered(request.host)
        if cache_mode != "bypass" and result.success:
            self._cache.put(request.fingerprint, result)
        if run.max_depth >= 0 and result.success:
            await self._follow(result, request, run)
        return result

    async def _robots(self, request: Request, run: CrawlRun) -> None:
        await self.robots.check(request.url, request)
        await self._crawl_delay(request, run)

    async def _robots_work(self, request: Request, run: CrawlRun) -> CrawlResult:
        """A host's robots.txt, scheduled by the frontier before its pages (:meth:`_queue_robots`):
        fetched into the robots cache, its Crawl-delay given to the frontier before the lease is
        settled (which lets the pages go). The result is the run's, not a page: the stream drops it.
        A robots.txt that cannot be read is no failure here -- each page reports why, from the cache."""
        try:
            status, problem = await self.robots.load(request.url)
        except FetchError as exc:  # the host itself may not be fetched: its pages will say so
            self.gate.answered(request.host)
            return _failed(request.url, exc, request)
        await self._crawl_delay(request, run)  # first: the host's next request is spaced by it already
        self.gate.answered(request.host)
        # Its status is shown (the monitor counts this work), but not a 429/503: the robots cache has
        # the answer already (RFC 9309), the dispatcher must not re-fetch it as a rate-limited page.
        shown = None if status in (429, 503) else status
        return CrawlResult(
            url=request.url, success=problem is None, status_code=shown, error_message=problem,
            error_type=None if problem is None else "RobotsUnavailableError", request=request, depth=request.depth,
        )

    async def _queue_robots(self, run: CrawlRun, request: Request) -> int:
        """Before the first request of a host is queued: its robots.txt, as work of the host that the
        frontier hands out first. 1 when it was queued (the frontier queues one per host), else 0."""
        host = request.host
        if not run.config.check_robots_txt or host in run.robots_hosts:
            return 0
        run.robots_hosts.add(host)
        return int(await run.frontier.enqueue_robots(robots_request(request.url, priority=request.priority)))

    def _report_disallowed(self, child: Request, run: CrawlRun) -> bool:
        """A link of the page just fetched that its host's robots.txt (known: the page was fetched after
        it) disallows is reported at once, without the frontier: handing it out would cost the host a
        delay with nothing sent. True when it was (or was already) reported; False for the frontier."""
        error = self.robots.known_disallowed(child.url, child)
        if error is None:
            return False
        fp = child.fingerprint
        if fp in run.queued_elsewhere:  # queued before robots.txt was known: the frontier reports it
            return False
        if fp not in run.reported_fps:
            run.reported_fps.add(fp)
            run.enqueued += 1
            run.reported.append(_failed(child.url, error, child))
        return True

    async def _crawl_delay(self, request: Request, run: CrawlRun) -> None:
        """Once per host and run: robots.txt's Crawl-delay, when longer than the run's, to the send gate
        and the frontier."""
        host = request.host
        if host not in run.delayed_hosts:
            run.delayed_hosts.add(host)
            delay = self.robots.crawl_delay(request.url)
            if delay and delay > run.base_delay:
                self.gate.set_host_delay(host, delay)
                await run.frontier.set_host_policy(host, delay=delay)
                # the request that brought it (robots.txt) went out under the run's delay: the next one
                # waits for this one from now
                await run.frontier.block_host(host, self.clock.now() + delay)

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
        if urls is not None:
            if urls_or_requests is not None:
                raise ConfigurationError("arun_many: pass the URLs once, positionally or as urls=, not both")
            urls_or_requests = urls
        if urls_or_requests is None:
            raise ConfigurationError("arun_many needs the URLs: arun_many([...]) or arun_many(urls=[...])")
        if isinstance(urls_or_requests, (str, Request)):
            raise ConfigurationError("arun_many takes a list of URLs or Requests; for one URL use arun()")
        self._check_screenshot(config)
        use_stream = config.stream if stream is None else stream
        chosen: Dispatcher
        if dispatcher is None:
            chosen = SemaphoreDispatcher(config.concurrency)
        elif runs_urls_itself(dispatcher):
            chosen = RunUrlsAdapter(cast(RunUrlsDispatcher, dispatcher), self, config, stream=use_stream)
        else:
            chosen = cast(Dispatcher, dispatcher)
        frontier = MemoryFrontier(FrontierOptions(clock=self.clock, max_in_flight=1_000_000))
        run = CrawlRun(frontier, config)
        # Every URL is validated and deduplicated here, before the first fetch (a repeated URL is
        # answered with its first one's result, so every repeat must be known before any result is
        # reported); the requests are made as the dispatcher pulls them (MemoryFrontier.enqueue_lazily).
        # Kept as three flat lists, not an object per URL: nothing for the garbage collector to visit.
        invalid: list[CrawlResult] = []
        plan_urls: list[str | Request] = []  # the URL as a Request keeps it, or the Request given
        plan_hosts: list[str] = []
        plan_fps: list[bytes] = []
        seen: set[bytes] = set()
        plain = True  # no priority, nothing delayed: the frontier may take them lazily
        meta, headers = run.meta or None, config.headers or None
        for item in urls_or_requests:
            try:
                if isinstance(item, str):
                    url, host, fp = plain_get(item)
                    entry: str | Request = url
                else:
                    entry = self._request(item, run)
                    host, fp = entry.host, entry.fingerprint
                    plain = plain and not entry.priority and entry.not_before is None
            except InvalidURLError as exc:
                invalid.append(_failed(str(item), exc))
                continue
            if fp in seen:
                repeat = Request.of_plain_get(entry, host, fp, meta, headers) if isinstance(entry, str) else entry
                run.dups.setdefault(fp, []).append(repeat)
            else:
                seen.add(fp)
                plan_urls.append(entry)
                plan_hosts.append(host)
                plan_fps.append(fp)
        requests = (
            Request.of_plain_get(u, h, f, meta, headers) if isinstance(u, str) else u
            for u, h, f in zip(plan_urls, plan_hosts, plan_fps, strict=True)
        )
        if plain:
            await frontier.enqueue_lazily(requests, len(plan_urls))
        else:
            await frontier.enqueue_requests(requests)
        if chosen.monitor is not None:
            chosen.monitor.add_queued(len(plan_urls))
        out = self._stream(run, chosen, invalid)
        if use_stream:
            return out
        async with out:
            return [r async for r in out]

    def _stream(self, run: CrawlRun, dispatcher: Dispatcher, first: list[CrawlResult]) -> CrawlStream:
        return CrawlStream(
            run, dispatcher, first, process=functools.partial(self._process, run=run), gate=self.gate,
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
        if max_pages < 1:
            raise ConfigurationError(f"max_pages={max_pages!r}: must be >= 1")
        if max_depth < 0:
            raise ConfigurationError(f"max_depth={max_depth!r}: must be >= 0")
        if delay < 0:
            raise ConfigurationError(f"delay={delay!r}: must be >= 0 seconds")
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
        invalid: list[CrawlResult] = []
        hosts: list[str] = []
        robots_queued = 0
        try:
            for seed in seeds:
                try:
                    request = self._request(seed, run, priority=0, depth=0)
                except InvalidURLError as exc:
                    invalid.append(_failed(str(seed), exc))
                    continue
                hosts.append(urlsplit(request.canonical_url).hostname or "")
                if run.enqueued < max_pages:
                    run.queued_elsewhere.add(request.fingerprint)
                    robots_queued += await self._queue_robots(run, request)
                    if await sched.enqueue_request(request):
                        run.enqueued += 1
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
        out = self._stream(run, dispatcher, invalid)
        if stream:
            return out
        async with out:
            return [r async for r in out]

    async def _follow(self, result: CrawlResult, request: Request, run: CrawlRun) -> None:
        """Queue the links of a fetched page (before its lease is settled, so the frontier never
        looks idle while children are on their way)."""
        if result.content_type not in _HTML_TYPES:
            return
        try:
            links = await extract_links_async(result.text, result.final_url or request.url)
        except PageTooComplexError as exc:
            log.warning("%s: links not followed: %s", request.url, exc)
            result.links = []
            return
        result.links = links
        depth = request.depth + 1
        if depth > run.max_depth or run.enqueued >= run.max_pages:
            return
        allowed = run.allowed
        children: list[Request] = []
        robots = self.robots if run.config.check_robots_txt else None
        for link in links:
            if allowed is not None and not _in_domains((urlsplit(link).hostname or "").lower(), allowed):
                continue
            try:
                children.append(self._request(link, run, priority=-depth, depth=depth))
            except InvalidURLError:
                continue
        frontier = run.frontier
        page_host = request.host
        monitor_n = 0
        async with run.enqueue_lock:
            for child in children:
                if run.enqueued >= run.max_pages:
                    break
                if robots is not None and child.host == page_host and self._report_disallowed(child, run):
                    continue
                if robots is not None and child.host != page_host:
                    run.queued_elsewhere.add(child.fingerprint)
                if child.host not in run.robots_hosts:
                    monitor_n += await self._queue_robots(run, child)
                if await frontier.enqueue_request(child):
                    run.enqueued += 1
                    monitor_n += 1
        if monitor_n and run.monitor is not None:
            run.monitor.add_queued(monitor_n)


def _in_domains(host: str, domains: frozenset[str]) -> bool:
    """``host`` is one of ``domains`` or a subdomain of one: a set look-up per label, not a scan of the
    domains (a crawl seeded with hundreds of hosts allows hundreds)."""
    if host in domains:
        return True
    dot = host.find(".")
    while dot >= 0:
        if host[dot + 1 :] in domains:
            return True
        dot = host.find(".", dot + 1)
    return False


def _failed(url: str, exc: CrawlherdError, request: Request | None = None) -> CrawlResult:
    return CrawlResult(
        url=url,
        success=False,
        error_message=str(exc),
        error_type=type(exc).__name__,
        request=request,
        depth=request.depth if request is not None else 0,
    )


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
