"""The resilience kernel: what every loop that talks to a service shares.

- **A typed outage.** A backend maps its driver's errors to
  :class:`~crawlherd.errors.BackendUnavailableError` at its boundary (one place per backend, as
  httpx's ``map_exceptions``), carrying its :data:`Role` (``frontier``, ``broker``, ``database``,
  ``sink``, ``fetch``). A caller decides what failed from ``exc.role`` -- never from the text of an
  exception or the name of its class.
- **One back-off.** :func:`backoff_delay` is the only back-off formula in the package: exponential,
  capped, with jitter so that workers do not reconnect in step.
- **One outage log.** :class:`OutageLog` says an outage once per service: one warning when it starts,
  one info line when it ends, with how long it lasted; :meth:`OutageLog.describe` says the outages
  under way for a status line, and :func:`watch` keeps asking a service that a process may not
  otherwise call for a long time (a dispatcher with nothing due, and its broker).
- **One retry runner.** :class:`Retrier` owns the loop of "try, on a temporary error log the outage,
  wait the back-off (or until told to stop), try again, log the recovery", with an optional deadline.
  Its callers declare which errors are temporary. :meth:`Retrier.call` runs one call that way;
  :class:`Attempts` is the same bookkeeping for a loop that does more than one call per round.
- **One batcher.** :class:`Batcher` gathers the calls made while a round trip is out into the next
  one, bounded in count and in bytes (group commit; the Redis frontier's leases, the SQS broker's
  batch calls, the worker's item writes).

(The shape follows APScheduler 4's ``_retry.py``: the policy in one place, each component naming its
temporary errors.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from crawlherd._aio import cancel_and_wait
from crawlherd.errors import BackendUnavailableError

__all__ = [
    "Attempts",
    "Batcher",
    "OutageLog",
    "Retrier",
    "RetryPolicy",
    "Role",
    "Stopped",
    "backoff_delay",
    "role_of",
    "service_name",
    "watch",
    "with_role",
]

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")

#: What a service is to the process that uses it; the name an outage is logged under.
Role = Literal["frontier", "broker", "database", "sink", "fetch"]


def backoff_delay(failures: int, *, base: float = 0.5, cap: float = 30.0, jitter: float = 0.2) -> float:
    """Seconds to wait after the ``failures``-th failure in a row: ``base * 2**(failures-1)``, capped at
    ``cap``, times a random factor in ``[1 - jitter, 1 + jitter]`` (never over ``cap``)."""
    # (the exponent is bounded: a float cannot hold 2**1024, and the cap is reached long before)
    delay = min(cap, base * 2 ** min(max(0, failures - 1), 64))
    jittered: float = delay * random.uniform(1.0 - jitter, 1.0 + jitter)
    return min(cap, jittered)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a :class:`Retrier` waits: :func:`backoff_delay` with these figures; ``deadline`` seconds
    after the first failure of a call it gives up and raises that failure (None: never)."""

    base: float = 0.5
    cap: float = 30.0
    jitter: float = 0.2
    deadline: float | None = None

    def delay(self, failures: int) -> float:
        return backoff_delay(failures, base=self.base, cap=self.cap, jitter=self.jitter)


def role_of(exc: BaseException, default: str) -> str:
    """The service an error is an outage of: its typed ``role``, else ``default`` (the role the caller
    was talking to)."""
    if isinstance(exc, BackendUnavailableError) and exc.role is not None:
        return exc.role
    return default


#: The name an outage of a role is said under, where it is not the role itself (the config DB is
#: what operators call the database the processes share).
_SHOWN = {"database": "config DB"}


def service_name(service: str) -> str:
    """The name ``service`` (a :data:`Role`, or a name already) is logged under: ``database`` is said
    ``config DB``, any other name as it is."""
    return _SHOWN.get(service, service)


@contextlib.contextmanager
def with_role(role: str) -> Iterator[None]:
    """Give a :class:`~crawlherd.errors.BackendUnavailableError` raised in the block ``role`` when its
    backend did not set one (the role of the thing called there); any other error passes unchanged."""
    try:
        yield
    except BackendUnavailableError as exc:
        if exc.role is None:
            exc.role = role
        raise


class OutageLog:
    """Tracks which services are down; logs the first failure and the recovery of each, once.

    A failure within ``grace`` seconds of a recovery is the same outage's tail (a client's pooled
    connections to a restarted server each fail once) and is logged at debug level only. A service is
    named by its role or by the name it is said under (:func:`service_name`): ``down("database")`` and
    ``up("config DB")`` are one outage.
    """

    def __init__(self, logger: logging.Logger, who: str, *, grace: float = 10.0) -> None:
        self._log = logger
        self._who = who
        self._grace = grace
        self._since: dict[str, float] = {}
        self._quiet: set[str] = set()  # down again within the grace: no second "back" line
        self._back_at: dict[str, float] = {}

    @property
    def down_now(self) -> frozenset[str]:
        """The services in an outage now."""
        return frozenset(self._since)

    def describe(self) -> str:
        """The outages under way, for a status line: ``broker unavailable for 42 s`` (joined by
        ``; ``), or "" when every service answers."""
        now = time.monotonic()
        return "; ".join(
            f"{service} unavailable for {now - since:.0f} s" for service, since in sorted(self._since.items())
        )

    def down(self, service: str, error: object) -> bool:
        """``service`` failed: a warning if it was up (the outage starts). True when it was up."""
        service = service_name(service)
        now = time.monotonic()
        if service in self._since:
            self._log.debug("%s: %s still unavailable: %s", self._who, service, error)
            return False
        self._since[service] = now
        if now - self._back_at.get(service, -1e18) < self._grace:
            self._quiet.add(service)
            self._log.debug("%s: %s failed again just after it came back: %s", self._who, service, error)
            return False
        self._log.warning("%s: %s unavailable (%s); carrying on, retrying with back-off", self._who, service, error)
        return True

    def up(self, service: str) -> bool:
        """``service`` answered: an info line if it was down (the outage ends). True when it was down."""
        service = service_name(service)
        since = self._since.pop(service, None)
        if since is None:
            return False
        now = time.monotonic()
        self._back_at[service] = now
        if service in self._quiet:
            self._quiet.discard(service)
            return True
        self._log.info("%s: %s is back after %.1fs", self._who, service, now - since)
        return True


async def watch(
    outages: OutageLog, service: str, check: Callable[[], Awaitable[object]], *, every: float,
    stop: asyncio.Event, timeout: float = 10.0, down_at_start: bool = False,
) -> None:
    """Until ``stop``: call ``check`` every ``every`` seconds and tell ``outages`` whether ``service``
    answered (a temporary error or no answer within ``timeout``: down; an answer: up). For a process
    that may not otherwise call the service for a long time, so that an outage is said when it starts,
    on every status line meanwhile, and when it ends. Only an outage this watch found is ended by its
    answer: one the process's own calls found (a publish refused while ``check`` still answers) ends
    when those calls succeed again, not on a cheaper call's word; ``down_at_start``: the outage under
    way is the one found at start-up (the same question), which this watch may end."""
    mine = down_at_start
    while not stop.is_set():
        try:
            async with asyncio.timeout(timeout):
                await check()
        except (BackendUnavailableError, TimeoutError) as exc:
            mine = mine or service_name(service) not in outages.down_now
            outages.down(service, exc)
        else:
            if mine:
                outages.up(service)
            mine = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await stop.wait()


class Stopped(Exception):
    """Raised by a retry wait that ended because its stop event was set."""


class Attempts:
    """The retry bookkeeping of one loop: :meth:`failed` after a temporary error (logs the outage, waits
    the back-off or until ``stop`` is set), :meth:`succeeded` after a round that worked (logs the
    recovery of what was down, resets the count). For a loop whose round is more than one call."""

    def __init__(self, retrier: Retrier, role: str, *, stop: asyncio.Event | None = None) -> None:
        self.retrier = retrier
        self.role = role
        self.stop = stop
        self.failures = 0
        self._first: float | None = None
        self._down: set[str] = set()

    async def failed(self, exc: BaseException) -> None:
        """Count a temporary failure: log it, then wait. Raises ``exc`` once the policy's deadline has
        passed, :class:`Stopped` when ``stop`` was set during the wait."""
        now = self.retrier.clock()
        if self._first is None:
            self._first = now
        self.failures += 1
        service = role_of(exc, self.role)
        self._down.add(service)
        self.retrier.outages.down(service, exc)
        policy = self.retrier.policy
        delay = policy.delay(self.failures)
        if policy.deadline is not None:
            left = self._first + policy.deadline - now
            if left <= 0:
                raise exc
            delay = min(delay, left)  # the last try comes at the deadline, not a back-off after it
        await self.retrier.wait(delay, self.stop)

    def succeeded(self) -> None:
        """A round worked: every service this loop saw down is back."""
        if self.failures:
            for service in self._down:
                self.retrier.outages.up(service)
        self.failures = 0
        self._first = None
        self._down.clear()


class Retrier:
    """The one retry runner. ``Retrier(outages, temporary=(BackendUnavailableError,), policy=...)``;
    ``await retrier.call(fn, role="broker")`` calls ``fn()`` until it returns, waiting the back-off after
    each temporary error (any other error goes straight up). ``sleep`` and ``clock`` (the deadline's)
    are injectable for tests."""

    def __init__(
        self,
        outages: OutageLog,
        *,
        temporary: tuple[type[BaseException], ...] = (BackendUnavailableError,),
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.outages = outages
        self.temporary = temporary
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self.clock = clock

    def is_temporary(self, exc: BaseException) -> bool:
        return isinstance(exc, self.temporary)

    def attempts(self, role: str, *, stop: asyncio.Event | None = None) -> Attempts:
        return Attempts(self, role, stop=stop)

    async def wait(self, seconds: float, stop: asyncio.Event | None = None) -> None:
        """Sleep ``seconds``, or until ``stop`` is set (then raise :class:`Stopped`)."""
        if stop is None:
            await self._sleep(seconds)
            return
        if stop.is_set():
            raise Stopped
        sleeping = asyncio.ensure_future(self._sleep(seconds))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((sleeping, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (sleeping, stopping):
                await cancel_and_wait(waiter)
        if stop.is_set():
            raise Stopped

    async def call(self, fn: Callable[[], Awaitable[T]], *, role: str, stop: asyncio.Event | None = None) -> T:
        """``fn()``'s result, retried through temporary errors (see the class)."""
        attempts = self.attempts(role, stop=stop)
        while True:
            try:
                result = await fn()
            except self.temporary as exc:
                await attempts.failed(exc)
                continue
            attempts.succeeded()
            return result


class Batcher(Generic[A, R]):
    """Group commit for a round trip: ``await batcher(arg)`` returns ``arg``'s result, got by one call
    of ``run(args)`` for every call made while the round trip before it was out -- at most ``max_batch``
    args and, when ``size`` is given, at most ``max_bytes`` of ``size(arg)`` a round trip (an arg larger
    than that goes alone). The first call goes out at once; under load one round trip serves many
    callers. ``concurrency`` round trips may be out at once (1: one after the other).

    ``run(args)`` returns one result per arg, in order: a value, or an exception raised to that arg's
    caller alone; an exception ``run`` raises goes to every caller of the batch. A caller cancelled
    while it waits does not stop the round trip it is part of; ``orphan(result)``, when given, is
    awaited for a result whose caller has gone (a lease to give back, say). :meth:`close` cancels the
    round trips running and every caller still waiting."""

    def __init__(
        self,
        run: Callable[[list[A]], Awaitable[list[R | BaseException]]],
        *,
        max_batch: int = 500,
        max_bytes: int | None = None,
        size: Callable[[A], int] | None = None,
        concurrency: int = 1,
        orphan: Callable[[R], Awaitable[object]] | None = None,
        name: str = "crawlherd-batcher",
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch!r}: must be >= 1")
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency!r}: must be >= 1")
        if (max_bytes is None) != (size is None):
            raise ValueError("max_bytes and size go together")
        self._run = run
        self._orphan = orphan
        self._name = name
        self._pending: list[tuple[A, asyncio.Future[R]]] = []
        # the bounds of a round trip, and how many may be out at once
        self._max, self._max_bytes, self._size = max_batch, max_bytes, size
        self._slots = concurrency
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: list[tuple[A, asyncio.Future[R]]] = []
        #: Round trips made, and the calls they served.
        self.batches = 0
        self.calls = 0

    async def __call__(self, arg: A) -> R:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[R] = loop.create_future()
        self._pending.append((arg, done))
        self._tasks = {t for t in self._tasks if not t.done() and t.get_loop() is loop}
        if len(self._tasks) < self._slots:
            task = loop.create_task(self._drain(), name=self._name)
            self._tasks.add(task)
        try:
            return await done
        except asyncio.CancelledError:
            # cancelled after its result was set: nobody else will use it
            if self._orphan is not None and done.done() and not done.cancelled() and done.exception() is None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(self._orphan(done.result()))
            raise

    def _take(self) -> list[tuple[A, asyncio.Future[R]]]:
        """The next batch off the pending calls, within the count and byte bounds."""
        if self._size is None or self._max_bytes is None:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            return batch
        used, n = 0, 0
        for arg, _ in self._pending[: self._max]:
            cost = self._size(arg)
            if n and used + cost > self._max_bytes:
                break
            used += cost
            n += 1
        batch, self._pending = self._pending[:n], self._pending[n:]
        return batch

    async def _drain(self) -> None:
        mine: list[tuple[A, asyncio.Future[R]]] = []
        try:
            while self._pending:
                mine = [(a, f) for a, f in self._take() if not f.done()]
                self._running.extend(mine)
                if mine:
                    await self._one(mine)
                for entry in mine:
                    self._running.remove(entry)
                mine = []
        finally:  # cancelled (close): no caller is left hanging
            for _, f in mine:
                f.cancel()

    async def _one(self, entries: list[tuple[A, asyncio.Future[R]]]) -> None:
        try:
            results = await self._run([a for a, _ in entries])
        except Exception as exc:  # noqa: BLE001 - handed to every caller of the round trip
            for _, f in entries:
                if not f.done():
                    f.set_exception(exc)
            return
        self.batches += 1
        self.calls += len(entries)
        for (_, f), result in zip(entries, results, strict=True):
            if not f.done():
                if isinstance(result, BaseException):
                    f.set_exception(result)
                else:
                    f.set_result(result)
            elif self._orphan is not None and not isinstance(result, BaseException):
                with contextlib.suppress(Exception):
                    await self._orphan(result)

    async def flush(self) -> None:
        """Wait until every call made so far has its answer (nothing is cancelled; bound it with a
        timeout of your own: a timeout cancels only this wait)."""
        while alive := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(alive)

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, set()
        for task in tasks:
            await cancel_and_wait(task)
        for _, f in (*self._running, *self._pending):  # a round trip cancelled before it began
            f.cancel()
        self._running, self._pending = [], []
