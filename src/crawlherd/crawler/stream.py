"""One run of the crawler (``arun_many`` or ``crawl``): its bookkeeping (:class:`CrawlRun`) and the
async iterator of its results (:class:`CrawlStream`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING

from crawlherd.clock import Clock
from crawlherd.crawler.concurrency.base import Dispatcher
from crawlherd.crawler.concurrency.rate_limiter import RateLimiter
from crawlherd.crawler.config import CrawlerRunConfig
from crawlherd.crawler.proxies import RunSession
from crawlherd.fetch.gate import HostGate, SendStamps
from crawlherd.fetch.robots import RobotsCache, SharedRobots, is_robots_request
from crawlherd.frontier import Frontier
from crawlherd.frontier.base import enqueue_many_of
from crawlherd.request import Request
from crawlherd.result import CrawlResult

if TYPE_CHECKING:
    from crawlherd.crawler.concurrency.monitor import CrawlerMonitor

__all__ = ["CrawlRun", "CrawlStream", "Room"]


class CrawlRun:
    """One arun_many / crawl: its frontier, options, and what the crawler's process step needs
    (repeated URLs to answer twice, hosts whose robots.txt delay is known, the page budget)."""

    __slots__ = ("allowed", "base_delay", "config", "delayed_hosts", "dups", "ended", "enqueue_lock", "enqueue_many",
                 "enqueued", "frontier", "gate_delay", "links_done", "max_depth", "max_pages", "meta", "monitor",
                 "owns_frontier", "queued_elsewhere", "reported", "reported_fps", "robots_hosts", "session",
                 "shared", "_reserving", "_settled")

    def __init__(self, frontier: Frontier, config: CrawlerRunConfig) -> None:
        self.frontier = frontier
        #: The frontier's ``enqueue_many`` when it has one (crawler/follow.py queues a page's links with it).
        self.enqueue_many = enqueue_many_of(frontier)
        self.config = config
        self.meta = config.request_meta()
        #: The run's User-Agent, cookies and proxies, when its config sets any (crawler/proxies.py).
        self.session = RunSession.of(config)
        self.dups: dict[bytes, list[Request]] = {}
        self.delayed_hosts: set[str] = set()
        #: Hosts whose robots.txt this run queued as work (a crawl obeying robots.txt).
        self.robots_hosts: set[str] = set()
        #: Results known without a fetch, found while following links (disallowed by robots.txt): the
        #: stream yields them after the result of the page that linked them.
        self.reported: list[CrawlResult] = []
        self.reported_fps: set[bytes] = set()
        #: Requests queued before their host's robots.txt was known (seeds, other hosts' links): if
        #: disallowed, the frontier's hand-out reports them, so they are never reported twice.
        self.queued_elsewhere: set[bytes] = set()
        #: The links of fetched pages this crawl already handled (crawler/follow.py): met again, skipped.
        self.links_done: set[str] = set()
        self.base_delay = 0.0
        self.max_pages = 0
        self.max_depth = -1
        self.enqueued = 0
        # Pages queue their links at once while there is room for all of them in max_pages (reserved);
        # near it, one page's links at a time (the lock), once the reservations are settled: a frontier
        # that awaits I/O (redis) must not let two pages both pass the max_pages check (see room()).
        self.enqueue_lock = asyncio.Lock()
        self._reserving = 0
        self._settled = asyncio.Event()
        self.allowed: frozenset[str] | None = None
        self.owns_frontier = True
        self.ended = False
        #: The per-host delay this run holds in the send gate (a crawl), released when it ends.
        self.gate_delay: float | None = None
        #: The send gate and robots cache the run shares with the frontier's other processes (share).
        self.shared: tuple[HostGate, RobotsCache] | None = None
        self.monitor: CrawlerMonitor | None = None

    @contextlib.asynccontextmanager
    async def room(self, n: int) -> AsyncIterator[Room]:
        """Where a page queues its ``n`` links within ``max_pages``. With room for all of them, they are
        reserved and queued while other pages queue theirs; else one page at a time, once the
        reservations are settled, counted exactly -- never past ``max_pages``, never short of it. (A
        link of a host whose robots.txt another page is queueing may reach the frontier first: its
        fetch checks robots.txt first all the same, and the robots.txt work then finds it cached.)"""
        if not self.enqueue_lock.locked() and self.enqueued + n <= self.max_pages:
            room = Room(self, reserved=True)
            self.enqueued += n
            self._reserving += 1
            try:
                yield room
            finally:
                self.enqueued -= n - room.kept
                self._reserving -= 1
                if not self._reserving:
                    self._settled.set()
            return
        async with self.enqueue_lock:
            while self._reserving:
                self._settled.clear()
                await self._settled.wait()
            yield Room(self, reserved=False)

    def twins(self, result: CrawlResult) -> list[CrawlResult]:
        """``result`` again for each repeat of its URL given to the same run."""
        if not self.dups or result.request is None:
            return []
        repeats = self.dups.pop(result.request.fingerprint, ())
        return [dataclasses.replace(result, url=t.url, request=t) for t in repeats]

    def share(self, gate: HostGate, robots: RobotsCache) -> None:
        """A frontier other processes may share (Redis; a :class:`~crawlherd.fetch.gate.SendStamps`): the
        crawler's send clock, and the robots.txt files it reads, are shared with them until the run
        ends (when the crawler shares none already)."""
        frontier = self.frontier
        if not isinstance(frontier, SendStamps) or gate.shared is not None:
            return
        gate.share(frontier)
        if isinstance(frontier, SharedRobots):
            robots.share(frontier)
        self.shared = (gate, robots)

    async def end(self, gate: HostGate) -> None:
        """Release what the run holds (idempotent): its send-gate delay and shared clock, and its
        frontier if it opened it. Called when its stream ends or is closed -- even one that was never iterated."""
        if self.ended:
            return
        self.ended = True
        if self.gate_delay is not None:
            gate.release(self.gate_delay)
        if self.shared is not None:
            for user in self.shared:
                user.share(None)
        if self.owns_frontier:
            await self.frontier.close()


class Room:
    """A page's room in its run's page budget (:meth:`CrawlRun.room`): :meth:`full` before each link,
    :meth:`took` for each one queued."""

    __slots__ = ("kept", "reserved", "run")

    def __init__(self, run: CrawlRun, *, reserved: bool) -> None:
        self.run = run
        self.reserved = reserved
        self.kept = 0

    def full(self) -> bool:
        return not self.reserved and self.run.enqueued >= self.run.max_pages

    def took(self) -> None:
        if self.reserved:
            self.kept += 1
        else:
            self.run.enqueued += 1


ProcessFn = Callable[[Request], Awaitable[CrawlResult]]


class CrawlStream(AsyncIterator[CrawlResult]):
    """Results in completion order. ``aclose()`` (or leaving ``async with``) stops the run: work in
    flight is cancelled and nothing is left running.

    Made by the crawler: ``CrawlStream(run, dispatcher, first, *, process, gate, clock, registry)``
    -- ``first`` are results known before fetching (invalid URLs), ``process`` fetches one request,
    ``registry`` is the crawler's set of open streams (the stream is in it until closed).
    """

    def __init__(
        self,
        run: CrawlRun,
        dispatcher: Dispatcher,
        first: list[CrawlResult],
        *,
        process: ProcessFn,
        gate: HostGate,
        clock: Clock,
        registry: set[CrawlStream],
    ) -> None:
        self._run = run
        self._dispatcher = dispatcher
        self._pending: deque[CrawlResult] = deque(first)
        # what the crawler lends the stream: its fetch step, send gate, clock, and set of open streams
        self._process, self._gate, self._clock, self._registry = process, gate, clock, registry
        self._source: AsyncIterator[CrawlResult] | None = None
        self._limiter: RateLimiter | None = None
        self._closed = False
        registry.add(self)

    @property
    def run(self) -> CrawlRun:
        """The run this stream reports on."""
        return self._run

    def __aiter__(self) -> CrawlStream:
        return self

    def _start(self) -> AsyncIterator[CrawlResult]:
        rl = self._limiter = self._dispatcher.rate_limiter
        if rl is not None:
            self._gate.add_limiter(rl)  # its slots are taken at send time (the send gate)
        source = self._source = self._dispatcher.run(
            self._run.frontier, self._process, clock=self._clock, rate_limit_at_send=True
        )
        return source

    async def __anext__(self) -> CrawlResult:
        if self._pending:
            return self._pending.popleft()
        if self._closed:
            raise StopAsyncIteration
        source = self._source or self._start()
        run = self._run
        while True:
            try:
                result = await source.__anext__()
            except BaseException:  # exhausted, failed or cancelled: release everything, then say so
                await self.aclose()
                raise
            if not is_robots_request(result.request):
                break  # robots.txt work is the run's, not a page of it
        if run.dups:
            self._pending.extend(run.twins(result))
        reported = run.reported
        if reported:
            self._pending.extend(reported)
            reported.clear()
        return result

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        self._registry.discard(self)
        try:
            if self._source is not None:
                await self._source.aclose()  # type: ignore[attr-defined]
        finally:
            if self._limiter is not None:
                self._gate.remove_limiter(self._limiter)
                self._limiter = None
            await self._run.end(self._gate)

    async def __aenter__(self) -> CrawlStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
