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

import asyncio
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast, overload
from urllib.parse import urljoin, urlsplit

from crawlherd.clock import Clock, SystemClock
from crawlherd.dispatch.base import Dispatcher
from crawlherd.dispatch.rate_limiter import RateLimiter
from crawlherd.dispatch.semaphore import SemaphoreDispatcher
from crawlherd.errors import ConfigurationError, CrawlherdError, FetchError, InvalidURLError, RobotsDisallowedError
from crawlherd.fetch.base import Fetcher, FetchLimits
from crawlherd.fetch.robots import RobotsCache
from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.request import Request
from crawlherd.result import CrawlResult

if TYPE_CHECKING:
    from crawlherd.dispatch.monitor import CrawlerMonitor

__all__ = ["CacheMode", "CrawlStream", "Crawler", "CrawlerRunConfig", "extract_links"]

CacheMode = Literal["bypass", "enabled", "refresh"]
_CACHE_MODES = ("bypass", "enabled", "refresh")
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", ""})


@dataclass(frozen=True)
class CrawlerRunConfig:
    """Per-run options.

    - ``stream``: ``arun_many`` returns an async iterator (completion order) instead of a list.
    - ``connect_timeout``, ``read_timeout``, ``total_timeout``: override the fetcher's limits (None
      keeps them).
    - ``headers``: sent with every request of the run, on top of the fetcher's.
    - ``check_robots_txt``: obey robots.txt (a disallowed URL gives a failed result,
      ``RobotsDisallowedError``); its ``Crawl-delay`` becomes the frontier's delay for that host.
    - ``screenshot``: ask the fetcher for a screenshot (browser fetchers; HTTP ignores it).
    - ``cache_mode``: ``bypass`` (always fetch, keep nothing), ``enabled`` (a URL fetched successfully
      earlier by this crawler is answered from memory), ``refresh`` (always fetch, update the cache).
    - ``concurrency``: requests in flight when no dispatcher is given.
    """

    stream: bool = False
    connect_timeout: float | None = None
    read_timeout: float | None = None
    total_timeout: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    check_robots_txt: bool = False
    screenshot: bool = False
    cache_mode: CacheMode = "bypass"
    concurrency: int = 16

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigurationError(f"CrawlerRunConfig.{name}={value!r}: must be > 0 seconds or None")
        if self.cache_mode not in _CACHE_MODES:
            raise ConfigurationError(f"CrawlerRunConfig.cache_mode={self.cache_mode!r}: use one of {_CACHE_MODES}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigurationError(f"CrawlerRunConfig.concurrency={self.concurrency!r}: must be an int >= 1")

    def clone(self, **changes: Any) -> CrawlerRunConfig:
        """A copy with some options changed."""
        return dataclasses.replace(self, **changes)

    def request_meta(self) -> dict[str, Any]:
        """The per-request overrides fetchers read from ``Request.meta``."""
        meta: dict[str, Any] = {}
        if self.connect_timeout or self.read_timeout or self.total_timeout:
            meta["crawlherd.timeouts"] = {
                "connect": self.connect_timeout,
                "read": self.read_timeout,
                "total": self.total_timeout,
            }
        if self.screenshot:
            meta["crawlherd.screenshot"] = True
        return meta


def extract_links(html: str, base_url: str) -> list[str]:
    """Absolute http(s) links of ``<a href>`` in ``html`` (``<base href>`` honoured), fragments
    dropped, duplicates removed, document order kept."""
    from selectolax.lexbor import LexborHTMLParser as HTMLParser

    tree = HTMLParser(html)
    base = tree.css_first("base[href]")
    if base is not None:
        base_url = urljoin(base_url, base.attributes.get("href") or "")
    seen: dict[str, None] = {}
    for node in tree.css("a[href]"):
        href = (node.attributes.get("href") or "").strip()
        if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
            continue
        url = urljoin(base_url, href).split("#", 1)[0]
        if url.startswith(("http://", "https://")):
            seen.setdefault(url, None)
    return list(seen)


class CrawlStream(AsyncIterator[CrawlResult]):
    """Results in completion order. ``aclose()`` (or leaving ``async with``) stops the run: work in
    flight is cancelled and nothing is left running."""

    def __init__(self, owner: Crawler, run: _Run, dispatcher: Dispatcher, first: list[CrawlResult]) -> None:
        self._owner = owner
        self._run = run
        self._dispatcher = dispatcher
        self._pending: deque[CrawlResult] = deque(first)
        self._source: AsyncIterator[CrawlResult] | None = None
        self._limiter: RateLimiter | None = None
        self._closed = False
        owner._streams.add(self)

    def __aiter__(self) -> CrawlStream:
        return self

    def _start(self) -> AsyncIterator[CrawlResult]:
        owner, run = self._owner, self._run
        rl = self._limiter = self._dispatcher.rate_limiter
        if rl is not None:
            owner._send_limiters.append(rl)  # its slots are taken at send time (the send gate)
        source = self._source = self._dispatcher.run(
            run.frontier, lambda request: owner._process(request, run), clock=owner.clock, rate_limit_at_send=True
        )
        return source

    async def __anext__(self) -> CrawlResult:
        if self._pending:
            return self._pending.popleft()
        if self._closed:
            raise StopAsyncIteration
        source = self._source or self._start()
        try:
            result = await source.__anext__()
        except BaseException:  # exhausted, failed or cancelled: release everything, then say so
            await self.aclose()
            raise
        dups = self._run.dups
        if dups and result.request is not None:
            twins = dups.pop(result.request.fingerprint, ())
            self._pending.extend(dataclasses.replace(result, url=t.url, request=t) for t in twins)
        return result

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        owner = self._owner
        owner._streams.discard(self)
        try:
            if self._source is not None:
                await self._source.aclose()  # type: ignore[attr-defined]
        finally:
            if self._limiter is not None:
                owner._send_limiters.remove(self._limiter)
                self._limiter = None
            await owner._end_run(self._run)

    async def __aenter__(self) -> CrawlStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class _Run:
    """One arun_many / crawl: the frontier, and what the process function needs."""

    __slots__ = ("allowed", "base_delay", "config", "delayed_hosts", "dups", "enqueued", "frontier", "max_depth",
                 "max_pages", "meta", "monitor", "owns_frontier", "ended", "gate_delay", "enqueue_lock")

    def __init__(self, frontier: Frontier, config: CrawlerRunConfig) -> None:
        self.frontier = frontier
        self.config = config
        self.meta = config.request_meta()
        self.dups: dict[bytes, list[Request]] = {}
        self.delayed_hosts: set[str] = set()
        self.base_delay = 0.0
        self.max_pages = 0
        self.max_depth = -1
        self.enqueued = 0
        # one page's links at a time: a frontier that awaits I/O must not let two pages both pass max_pages
        self.enqueue_lock = asyncio.Lock()
        self.allowed: tuple[str, ...] | None = None
        self.owns_frontier = True
        self.ended = False
        self.gate_delay: float | None = None
        self.monitor: CrawlerMonitor | None = None


class Crawler:
    """The crawl engine. ``Crawler(*, fetcher=None, limits=None, allow_private_addresses=None,
    config=None, clock=None, max_connections=100)``; use it as ``async with Crawler() as crawler``.

    Without ``fetcher`` an :class:`~crawlherd.fetch.http.HttpFetcher` is made from ``limits`` (and
    ``allow_private_addresses``). A fetcher passed in (``BrowserFetcher``, a test double...) is taken
    over: the crawler enters it and closes it, as httpx does with a transport.
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
    ) -> None:
        if fetcher is not None and (limits is not None or allow_private_addresses is not None):
            raise ConfigurationError("pass either fetcher= or limits=/allow_private_addresses=, not both")
        if fetcher is None:
            from crawlherd.fetch.http import HttpFetcher

            limits = limits or FetchLimits()
            if allow_private_addresses is not None:
                limits = dataclasses.replace(limits, allow_private_addresses=allow_private_addresses)
            fetcher = HttpFetcher(limits, max_connections=max_connections)
        self.fetcher: Fetcher = fetcher
        self.config = config or CrawlerRunConfig()
        self.clock: Clock = clock or SystemClock()
        self.robots = RobotsCache(fetcher, clock=self.clock)
        self._cache: dict[bytes, CrawlResult] = {}
        self._streams: set[CrawlStream] = set()
        self._entered = False
        # Per-host spacing at send time (see _send_gate): the delay of the crawl running, robots.txt
        # overrides, and when each host may next be sent to.
        self._gate_delay = 0.0
        self._active_delays: list[float] = []
        self._host_delay: dict[str, float] = {}
        self._host_next: dict[str, float] = {}
        self._send_limiters: list[RateLimiter] = []
        self._gate_outside = not hasattr(fetcher, "send_gate")
        if not self._gate_outside:
            fetcher.send_gate = self._send_gate  # type: ignore[attr-defined]

    async def __aenter__(self) -> Crawler:
        await self.fetcher.__aenter__()
        self._entered = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop every open stream and close the fetcher. Idempotent."""
        for stream in list(self._streams):
            await stream.aclose()
        self._entered = False
        await self.fetcher.close()

    # -- one URL ------------------------------------------------------------------------------------

    async def arun(self, url_or_request: str | Request, config: CrawlerRunConfig | None = None) -> CrawlResult:
        """Fetch one URL (no frontier, no dispatcher): its result, failed or not."""
        config = config or self.config
        run = _Run(cast(Frontier, _NoFrontier()), config)
        try:
            request = self._request(url_or_request, run)
        except InvalidURLError as exc:
            return _failed(str(url_or_request), exc)
        return await self._process(request, run)

    def _request(self, item: str | Request, run: _Run, **kw: Any) -> Request:
        meta = run.meta
        headers = run.config.headers
        if isinstance(item, Request):
            if meta or headers:
                return item.replace(meta={**item.meta, **meta}, headers={**headers, **item.headers})
            return item
        if not isinstance(item, str):
            raise InvalidURLError(f"expected a URL string or a Request, got {type(item).__name__}: {item!r:.100}")
        return Request(item, meta=meta or None, headers=headers or None, **kw)

    async def _process(self, request: Request, run: _Run) -> CrawlResult:
        config = run.config
        cache_mode = config.cache_mode
        try:
            if config.check_robots_txt:
                await self._robots(request, run)
            if cache_mode == "enabled":
                hit = self._cache.get(request.fingerprint)
                if hit is not None:
                    return dataclasses.replace(hit, url=request.url, request=request, dispatch=None)
            if self._gate_outside:
                wait = self._send_gate(request.host)
                if wait is not None:
                    await wait
            response = await self.fetcher.fetch(request)
        except FetchError as exc:
            return _failed(request.url, exc, request)
        status = response.status
        result = CrawlResult(
            url=request.url,
            success=status < 400,
            status_code=status,
            error_message=None if status < 400 else f"HTTP {status}",
            final_url=response.url,
            headers=response.headers,
            body=response.body,
            encoding=response.encoding,
            elapsed=response.elapsed,
            redirects=response.redirects,
            depth=request.depth,
            screenshot=response.screenshot,
            request=request,
        )
        if cache_mode != "bypass" and result.success:
            self._cache[request.fingerprint] = result
        if run.max_depth >= 0 and result.success:
            await self._follow(result, request, run)
        return result

    def _send_gate(self, host: str) -> Awaitable[None] | None:
        """Keep a host's spacing between the moments requests *leave*, not only between the moments
        the frontier or the rate limiter let them go: a request let go earlier may leave later (a busy
        worker, a new connection, a robots.txt fetch), and the server must still never see two
        requests closer than the delay. The HTTP fetcher calls this once the connection is ready,
        right before writing; None means "send now" (the common, allocation-free case)."""
        wait = 0.0
        claim = False
        for rl in self._send_limiters:
            w = rl.reserve(host)  # the rate limiter's slot is taken here, once per request sent
            if w > wait:
                wait = w
            if not claim and rl.spaced(host):
                claim = True
        delay = self._host_delay.get(host, self._gate_delay) if (self._gate_delay or self._host_delay) else 0.0
        if not delay and not claim:
            return self.clock.sleep(wait) if wait > 0 else None
        return self._space(host, delay, wait, claim)

    async def _space(self, host: str, delay: float, wait: float, claim: bool) -> None:
        clock = self.clock
        if wait > 0:
            await clock.sleep(wait)
        if claim:
            for rl in self._send_limiters:
                while (w := rl.claim(host)) > 0:
                    await clock.sleep(w)
        if not delay:
            return
        host_next = self._host_next
        while True:
            now = clock.now()
            ready = host_next.get(host, 0.0)
            if ready <= now:
                if len(host_next) > 50_000:  # forget hosts whose spacing has passed
                    for name in [h for h, t in host_next.items() if t <= now]:
                        del host_next[name]
                host_next[host] = now + delay
                return
            await clock.sleep(ready - now)

    async def _robots(self, request: Request, run: _Run) -> None:
        if not await self.robots.allowed(request.url):
            raise RobotsDisallowedError(f"{request.url}: disallowed by robots.txt", url=request.url, request=request)
        host = request.host
        if host not in run.delayed_hosts:
            run.delayed_hosts.add(host)
            delay = self.robots.crawl_delay(request.url)
            if delay and delay > run.base_delay:
                self._host_delay[host] = delay
                await run.frontier.set_host_policy(host, delay=delay)

    # -- many URLs ------------------------------------------------------------------------------------

    @overload
    async def arun_many(
        self,
        urls_or_requests: Iterable[str | Request],
        *,
        dispatcher: Dispatcher | None = ...,
        config: CrawlerRunConfig | None = ...,
        stream: Literal[False],
    ) -> list[CrawlResult]: ...

    @overload
    async def arun_many(
        self,
        urls_or_requests: Iterable[str | Request],
        *,
        dispatcher: Dispatcher | None = ...,
        config: CrawlerRunConfig | None = ...,
        stream: Literal[True],
    ) -> CrawlStream: ...

    @overload
    async def arun_many(
        self,
        urls_or_requests: Iterable[str | Request],
        *,
        dispatcher: Dispatcher | None = ...,
        config: CrawlerRunConfig | None = ...,
        stream: bool | None = ...,
    ) -> list[CrawlResult] | CrawlStream: ...

    async def arun_many(
        self,
        urls_or_requests: Iterable[str | Request],
        *,
        dispatcher: Dispatcher | None = None,
        config: CrawlerRunConfig | None = None,
        stream: bool | None = None,
    ) -> list[CrawlResult] | CrawlStream:
        """Fetch every URL: a list of results, or with ``stream=True`` (or ``config.stream``) an async
        iterator in completion order. Exactly one result per item given, in the same number -- an
        invalid URL gives a failed result, a repeated URL is fetched once and answered for each time.
        ``dispatcher`` defaults to ``SemaphoreDispatcher(config.concurrency)``."""
        config = config or self.config
        if isinstance(urls_or_requests, (str, Request)):
            raise ConfigurationError("arun_many takes a list of URLs or Requests; for one URL use arun()")
        dispatcher = dispatcher or SemaphoreDispatcher(config.concurrency)
        frontier = open_scheduler("memory://", clock=self.clock, max_in_flight=1_000_000)
        run = _Run(frontier, config)
        invalid: list[CrawlResult] = []
        requests: list[Request] = []
        seen: dict[bytes, Request] = {}
        for item in urls_or_requests:
            try:
                request = self._request(item, run)
            except InvalidURLError as exc:
                invalid.append(_failed(str(item), exc))
                continue
            fp = request.fingerprint
            if fp in seen:
                run.dups.setdefault(fp, []).append(request)
            else:
                seen[fp] = request
                requests.append(request)
        await frontier.enqueue_requests(requests)
        if dispatcher.monitor is not None:
            dispatcher.monitor.add_queued(len(requests))
        out = CrawlStream(self, run, dispatcher, invalid)
        use_stream = config.stream if stream is None else stream
        if use_stream:
            return out
        async with out:
            return [r async for r in out]

    async def _end_run(self, run: _Run) -> None:
        """Release what a run holds (idempotent): its send-gate delay, and its frontier if it opened it.
        Called when its stream ends or is closed -- even one that was never iterated."""
        if run.ended:
            return
        run.ended = True
        if run.gate_delay is not None:  # a crawl: its delay no longer holds
            self._active_delays.remove(run.gate_delay)
            self._gate_delay = max(self._active_delays, default=0.0)
        if run.owns_frontier:
            await run.frontier.close()

    # -- following links ------------------------------------------------------------------------------

    @overload
    async def crawl(
        self,
        seeds: Iterable[str | Request],
        *,
        max_pages: int,
        max_depth: int,
        allowed_domains: Iterable[str] | None = ...,
        stream: Literal[True] = ...,
        dispatcher: Dispatcher | None = ...,
        config: CrawlerRunConfig | None = ...,
        frontier: str | Frontier = ...,
        delay: float = ...,
        max_in_flight_per_host: int = ...,
    ) -> CrawlStream: ...

    @overload
    async def crawl(
        self,
        seeds: Iterable[str | Request],
        *,
        max_pages: int,
        max_depth: int,
        allowed_domains: Iterable[str] | None = ...,
        stream: Literal[False],
        dispatcher: Dispatcher | None = ...,
        config: CrawlerRunConfig | None = ...,
        frontier: str | Frontier = ...,
        delay: float = ...,
        max_in_flight_per_host: int = ...,
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
        run = _Run(sched, config)
        run.base_delay = delay
        run.max_pages = max_pages
        run.max_depth = max_depth
        invalid: list[CrawlResult] = []
        hosts: list[str] = []
        try:
            for seed in seeds:
                try:
                    request = self._request(seed, run, priority=0, depth=0)
                except InvalidURLError as exc:
                    invalid.append(_failed(str(seed), exc))
                    continue
                hosts.append(urlsplit(request.canonical_url).hostname or "")
                if run.enqueued < max_pages and await sched.enqueue_request(request):
                    run.enqueued += 1
        except BaseException:
            if owns:
                await sched.close()
            raise
        domains = [d.lower().lstrip(".") for d in allowed_domains] if allowed_domains is not None else hosts
        run.allowed = None if "*" in domains else tuple(domains)
        if dispatcher.monitor is not None:
            dispatcher.monitor.add_queued(run.enqueued)
        run.owns_frontier = owns
        run.monitor = dispatcher.monitor
        run.gate_delay = delay
        self._active_delays.append(delay)
        self._gate_delay = max(self._active_delays)
        out = CrawlStream(self, run, dispatcher, invalid)
        if stream:
            return out
        async with out:
            return [r async for r in out]

    async def _follow(self, result: CrawlResult, request: Request, run: _Run) -> None:
        """Queue the links of a fetched page (before its lease is settled, so the frontier never
        looks idle while children are on their way)."""
        if result.content_type not in _HTML_TYPES:
            return
        links = extract_links(result.text, result.final_url or request.url)
        result.links = links
        depth = request.depth + 1
        if depth > run.max_depth or run.enqueued >= run.max_pages:
            return
        allowed = run.allowed
        children: list[Request] = []
        for link in links:
            if allowed is not None:
                host = (urlsplit(link).hostname or "").lower()
                if not any(host == d or host.endswith("." + d) for d in allowed):
                    continue
            try:
                children.append(self._request(link, run, priority=-depth, depth=depth))
            except InvalidURLError:
                continue
        frontier = run.frontier
        monitor_n = 0
        async with run.enqueue_lock:
            for child in children:
                if run.enqueued >= run.max_pages:
                    break
                if await frontier.enqueue_request(child):
                    run.enqueued += 1
                    monitor_n += 1
        if monitor_n and run.monitor is not None:
            run.monitor.add_queued(monitor_n)


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

