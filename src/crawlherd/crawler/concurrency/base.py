"""The dispatcher protocol: run the frontier's requests with bounded concurrency and hand back exactly
one :class:`~crawlherd.result.CrawlResult` per request, in completion order.

A dispatcher pulls leases from a :class:`~crawlherd.frontier.Frontier`, calls the crawler's
``process(request)`` (which never raises for a failed fetch: it returns a failed result) and settles
each lease: ``ack`` for a success, ``fail`` for a failure, ``retry`` when the URL must be fetched again
(rate limited, pulled back under memory pressure, or ``process`` raised
:class:`~crawlherd.errors.RetryLater`: a page to fetch through another session) -- so everything goes back *through the
frontier*, and nothing is returned twice or dropped. With a :class:`RateLimiter` attached, a
rate-limited answer is re-fetched up to ``max_retries`` times (the frontier holds the URL back and
blocks the host for the back-off); with a :class:`CrawlerMonitor` attached, every step is counted.

Closing the iterator :meth:`Dispatcher.run` returns cancels the work in flight; the leases of that
work are put back into the frontier. A lease that cannot be put back, or settled, because the frontier
is unavailable (down, its disk full) is kept by the dispatcher and put back by its next run on that
frontier, before that run leases anything: an outage in the middle of a run does not leave pages out
until their leases expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from crawlherd._aio import awaiting
from crawlherd.clock import Clock, SystemClock
from crawlherd.crawler.concurrency.memory_usage import ProcessMemory
from crawlherd.crawler.concurrency.rate_limiter import parse_retry_after
from crawlherd.errors import BackendUnavailableError, LeaseError, RetryLater
from crawlherd.frontier.base import Frontier, Lease
from crawlherd.request import Request
from crawlherd.result import CrawlResult, DispatchInfo

if TYPE_CHECKING:
    from crawlherd.crawler.concurrency.monitor import CrawlerMonitor
    from crawlherd.crawler.concurrency.rate_limiter import RateLimiter

__all__ = ["BaseDispatcher", "Dispatcher", "ProcessFn"]

#: The crawler's work for one request. Must not raise for a failed fetch (return a failed result).
ProcessFn = Callable[[Request], Awaitable[CrawlResult]]

_DONE = object()
log = logging.getLogger("crawlherd.crawler.concurrency")


#: Seconds a page put back (RetryLater) is tried again while the frontier cannot take it.
GIVE_BACK_PATIENCE = 60.0
#: Seconds a lease whose work was cancelled (shutdown, the loop lost its frontier) is tried to be given back.
_GIVE_BACK_BOUND = 5.0
#: Seconds a stopped run's page tasks get to end (a cancelled one gives its lease back within
#: _GIVE_BACK_BOUND) before those still running are cancelled again.
_STOP_NUDGE = 10.0


@runtime_checkable
class Dispatcher(Protocol):
    """Runs the requests of a frontier under some concurrency policy."""

    rate_limiter: RateLimiter | None
    monitor: CrawlerMonitor | None

    def run(
        self, frontier: Frontier, process: ProcessFn, *, clock: Clock | None = None, rate_limit_at_send: bool = False
    ) -> AsyncIterator[CrawlResult]:
        """Results as they complete, until the frontier is idle. Closing the iterator early cancels
        the work in flight (its leases go back to the frontier). A fatal condition (memory pressure
        past its timeout, a frontier backend that went away) ends the iteration with its error.

        ``rate_limit_at_send``: the caller takes the rate limiter's slot itself at the moment each
        request is written (the Crawler does, through the fetcher's send gate), so the dispatcher
        does not wait for it before calling ``process``; back-off and re-fetches stay here."""
        ...


class _RunState:
    __slots__ = ("clock", "frontier", "process", "reserve", "requeues", "retries", "task_ids", "tasks")

    def __init__(self, frontier: Frontier, process: ProcessFn, clock: Clock, reserve: bool = True) -> None:
        self.reserve = reserve
        self.frontier = frontier
        self.process = process
        self.clock = clock
        self.retries: dict[bytes, int] = {}
        self.requeues: dict[bytes, int] = {}
        self.task_ids = itertools.count(1)
        #: The run's page tasks (a dispatcher adds those it starts), for a stop to check on.
        self.tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


async def _stop(driver: asyncio.Task[None], state: _RunState) -> None:
    """Cancel the run's ``driver`` and wait until it has ended. A page task still running
    ``_STOP_NUDGE`` seconds on let its cancellation go by (a library on its way swallowed it, and it
    went on with the next page): it is cancelled again, and where it was is logged -- a stop must not
    wait for ever. A cancellation of the caller while it waits goes on (as in ``cancel_and_wait``)."""
    driver.cancel()
    while not driver.done():
        await asyncio.wait({driver}, timeout=_STOP_NUDGE)
        stuck = [t for t in state.tasks if not t.done()]
        if not driver.done() and stuck:
            log.warning("%d page task(s) still running %g s after their run was stopped, cancelled again: %s",
                        len(stuck), _STOP_NUDGE, "; ".join(f"{t.get_name()}: {awaiting(t)}" for t in stuck))
            for t in stuck:
                t.cancel()
    if not driver.cancelled():
        driver.exception()  # retrieved (the consumer got what it emitted)


class _Channel:
    """The results of a run on their way to its consumer: a deque, and the one future the consumer
    waits on when it is empty (an ``asyncio.Queue`` without what a single consumer does not need)."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: deque[object] = deque()
        self.waiter: asyncio.Future[None] | None = None

    def put(self, item: object) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():  # done: the consumer was cancelled while it waited
                waiter.set_result(None)


class BaseDispatcher:
    """What every dispatcher shares: running one lease (rate limiting, re-fetches, settling,
    monitoring) and the result channel. crawlherd's dispatchers implement :meth:`_drive`.

    It is also the base class of a dispatcher written as crawl4ai documents one: subclass it, call
    ``super().__init__(rate_limiter)``, and implement ``run_urls(urls, crawler, config)`` (and whatever
    ``crawl_url`` it uses, calling ``self.crawler.arun(url, config=config)``); the
    :class:`~crawlherd.crawler.Crawler` then hands it the URLs and sets ``self.crawler``.
    """

    def __init__(self, rate_limiter: RateLimiter | None = None, monitor: CrawlerMonitor | None = None) -> None:
        self.rate_limiter = rate_limiter
        self.monitor = monitor
        #: The crawler running this dispatcher (set by ``arun_many`` for crawl4ai-style dispatchers).
        self.crawler: Any = None
        self._memory = monitor.memory if monitor is not None else ProcessMemory()

    #: Leases of ``_unreturned_to`` that could not be put back or settled (the frontier unavailable):
    #: put back by the next :meth:`run` on that frontier. Class defaults: a crawl4ai-style subclass may
    #: not call ``__init__``.
    _unreturned: tuple[Lease, ...] = ()
    _unreturned_to: Frontier | None = None

    def _keep_unreturned(self, frontier: Frontier, lease: Lease) -> None:
        if self._unreturned_to is not frontier:  # a new frontier: the old one's leases expire there
            self._unreturned, self._unreturned_to = (), frontier
        self._unreturned += (lease,)

    async def _put_back_unreturned(self, frontier: Frontier) -> None:
        """Put back the leases an earlier run on ``frontier`` could not (see the module docstring); the
        frontier still unavailable: its error, the leases kept for the next run."""
        leases = self._unreturned
        if self._unreturned_to is not frontier:
            self._unreturned, self._unreturned_to = (), frontier
            return
        for i, lease in enumerate(leases):
            try:
                await frontier.retry(lease, 0.0)
            except LeaseError:  # expired meanwhile, or settled after all: nothing to put back
                pass
            except BaseException:
                self._unreturned = leases[i:]
                raise
        if leases:
            self._unreturned = ()
            log.info("put back %d lease(s) held when the frontier became unavailable", len(leases))

    async def run_urls(self, urls: Iterable[str], crawler: Any, config: Any = None) -> list[CrawlResult]:
        """crawl4ai's entry point: ``crawler.arun_many(urls, dispatcher=self, config=config)``, as a
        list. A crawl4ai-style subclass overrides it to run the URLs itself."""
        return cast(
            "list[CrawlResult]", await crawler.arun_many(list(urls), dispatcher=self, config=config, stream=False)
        )

    async def run(
        self, frontier: Frontier, process: ProcessFn, *, clock: Clock | None = None, rate_limit_at_send: bool = False
    ) -> AsyncIterator[CrawlResult]:
        if self._unreturned:
            await self._put_back_unreturned(frontier)
        state = _RunState(frontier, process, clock or SystemClock(), not rate_limit_at_send)
        channel = _Channel()
        monitor = self.monitor
        if monitor is not None:
            monitor.start()
        loop = asyncio.get_running_loop()
        driver = loop.create_task(self._drive_then_done(state, channel.put), name="crawlherd-dispatch")
        items = channel.items
        try:
            while True:
                if not items:
                    channel.waiter = waiter = loop.create_future()
                    await waiter
                    continue
                item = items.popleft()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]
            await driver
        finally:
            await _stop(driver, state)
            if monitor is not None:
                await monitor.stop()

    async def _drive_then_done(self, state: _RunState, emit: Callable[[object], None]) -> None:
        try:
            await self._drive(state, emit)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, who re-raises it
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            emit(exc)
            return
        emit(_DONE)

    async def _drive(self, state: _RunState, emit: Callable[[object], None]) -> None:
        raise NotImplementedError

    async def _retry_later(self, state: _RunState, lease: Lease, delay: float) -> None:
        """Put ``lease`` back to be leased again after ``delay``. The frontier unavailable (down, a disk
        full, stale connections just after it came back): tried again with back-off for up to
        ``GIVE_BACK_PATIENCE`` seconds -- the slot waits, as the whole loop would -- before the error goes up
        (the lease then comes back when it expires). A lease lost meanwhile (expired, or a frontier that
        restarted empty) has nothing to put back."""
        await self._put_back(state, lease, delay, patience=GIVE_BACK_PATIENCE)

    async def _give_back(self, state: _RunState, lease: Lease) -> None:
        """Put a lease whose work was cancelled back into the frontier (best effort, bounded: tried again
        for a few seconds, so that the stale connections a frontier that just came back leaves behind do
        not keep the page out until its lease runs out). Not put back: kept for the next run."""
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(_GIVE_BACK_BOUND):
                await self._put_back(state, lease, 0.0, patience=_GIVE_BACK_BOUND)
            return
        self._keep_unreturned(state.frontier, lease)

    @staticmethod
    async def _put_back(state: _RunState, lease: Lease, delay: float, *, patience: float) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + patience
        pause = 0.1
        while True:
            try:
                await state.frontier.retry(lease, delay)
                return
            except LeaseError:
                return
            except BackendUnavailableError:
                if loop.time() + pause > give_up:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)

    async def _handle(self, state: _RunState, lease: Lease) -> CrawlResult | None:
        """Run one lease; the result to emit, or None when the URL went back to the frontier."""
        request = lease.request
        host = request.host
        clock = state.clock
        rl = self.rate_limiter
        monitor = self.monitor
        if rl is not None and state.reserve:
            await rl.take_slot(host, clock)
        memory = self._memory
        mem_start = memory.rss()
        info = DispatchInfo(next(state.task_ids), clock.now(), 0.0, mem_start)
        if monitor is not None:
            monitor.task_started()
        try:  # the crawler's result; an exception of its own is a failed result (one URL never aborts the batch)
            result = await state.process(request)
        except RetryLater as later:  # not a failure: leased again after its delay
            await self._retry_later(state, lease, later.delay)
            if monitor is not None:
                monitor.task_retried()
            return None
        except asyncio.CancelledError:  # back in the monitor's queue
            if monitor is not None:
                monitor.in_flight -= 1
                monitor.queued += 1
            raise
        except Exception as exc:  # noqa: BLE001 - one URL never aborts the batch
            result = _crashed(request, exc)
        status = result.status_code
        if status is not None and status >= 400:
            if await self._error_status(state, lease, result, status):
                return None
        elif rl is not None:
            rl.on_success(host)
        info.end_time = clock.now()
        info.memory_at_end = mem_end = memory.rss()
        info.peak_memory = mem_end if mem_end > mem_start else mem_start
        if state.retries:
            info.retries = state.retries.pop(request.fingerprint, 0)
        if state.requeues:
            info.requeues = state.requeues.pop(request.fingerprint, 0)
        result.dispatch = info
        if result.success:  # most pages: the ack without a coroutine of _settle's
            try:
                await state.frontier.ack(lease)
            except LeaseError:
                _expired(lease)
        else:
            await self._settle(state, lease, result)
        if monitor is not None:
            monitor.task_finished(result)
        return result

    async def _error_status(self, state: _RunState, lease: Lease, result: CrawlResult, status: int) -> bool:
        """An answer of ``status`` >= 400: with a rate limiter, a rate-limit code is re-fetched after its
        back-off (True: the lease went back to the frontier) or, past ``max_retries``, a
        RateLimitedError; without one, a 429/503's Retry-After still holds the host."""
        request = lease.request
        host = request.host
        headers = result.headers
        frontier = state.frontier
        rl = self.rate_limiter
        if rl is not None and status in rl.rate_limit_codes:
            fp = request.fingerprint
            attempt = state.retries.get(fp, 0)
            now = state.clock.now()
            decision = rl.on_rate_limited(host, status, parse_retry_after(headers.get("retry-after"), now), attempt)
            if decision.retry:
                state.retries[fp] = attempt + 1
                await frontier.block_host(host, now + decision.delay)
                await frontier.retry(lease, decision.delay)
                if self.monitor is not None:
                    self.monitor.task_retried()
                return True
            result.success = False
            result.error_type = "RateLimitedError"
            result.error_message = decision.reason
        elif status in (429, 503) and "retry-after" in headers:
            now = state.clock.now()
            retry_after = parse_retry_after(headers["retry-after"], now)
            if retry_after:
                await frontier.block_host(host, now + retry_after)
        return False

    async def _settle(self, state: _RunState, lease: Lease, result: CrawlResult) -> None:
        try:
            if result.success:
                await state.frontier.ack(lease)
            else:
                await state.frontier.fail(lease, result.error_message or f"HTTP {result.status_code}")
        except LeaseError:
            _expired(lease)


def _expired(lease: Lease) -> None:
    """Say that ``lease`` expired while its page was being fetched: the frontier has already put the URL
    back. The result is still reported. Either the frontier's lease_timeout is too short for this site,
    or (a shared frontier) this process could not renew the lease in time: it hung."""
    log.warning(
        "lease of %s expired before it was settled: the frontier's lease_timeout is too short for it, "
        "or this process did not renew it within the frontier's liveness (it hung or lost the frontier)",
        lease.request.url,
    )


def _crashed(request: Request, exc: Exception) -> CrawlResult:
    """The failed result of ``request`` whose processing raised ``exc``."""
    return CrawlResult(
        url=request.url,
        success=False,
        error_message=f"{type(exc).__name__}: {exc}",
        error_type=type(exc).__name__,
        request=request,
        depth=request.depth,
    )
