"""``MemoryAdaptiveDispatcher``: as many requests in flight as memory allows.

Memory is read by :class:`~crawlherd.crawler.concurrency.memory_usage.SystemMemory`: a percentage of the **container's
limit** when there is one (cgroup v2, then v1), else of the machine's memory -- the same reader the
monitor shows (with a monitor and no ``memory_reader``, the dispatcher uses the monitor's). The reading
is injectable (``memory_reader``) so tests drive it without allocating.

States, with hysteresis:

- **normal**: up to ``max_session_permit`` requests in flight;
- **pressure** (reading >= ``memory_threshold_percent``): no new request starts until the reading
  falls to ``recovery_threshold_percent`` or below (crawl4ai's rule; the recovery threshold defaults
  to 5 points under the threshold: 85 for the default 90, 80 for a threshold of 85);
- **critical** (reading >= ``critical_threshold_percent``): in addition, the requests in flight --
  all but the oldest, so the crawl still moves -- are cancelled and their URLs go back to the
  frontier (``retry``); each is fetched again later and still yields exactly one result.

Staying out of *normal* for longer than ``memory_wait_timeout`` ends the run with
:class:`~crawlherd.errors.MemoryPressureError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from crawlherd import metrics
from crawlherd._aio import cancel_and_wait
from crawlherd.clock import Clock
from crawlherd.crawler.concurrency.base import BaseDispatcher, _RunState
from crawlherd.crawler.concurrency.memory_usage import SystemMemory
from crawlherd.errors import BackendUnavailableError, ConfigurationError, MemoryPressureError
from crawlherd.frontier.base import Lease

if TYPE_CHECKING:
    from crawlherd.crawler.concurrency.monitor import CrawlerMonitor
    from crawlherd.crawler.concurrency.rate_limiter import RateLimiter

__all__ = ["MemoryAdaptiveDispatcher"]

State = Literal["normal", "pressure", "critical"]


class MemoryAdaptiveDispatcher(BaseDispatcher):
    """``MemoryAdaptiveDispatcher(memory_threshold_percent=90, critical_threshold_percent=95,
    recovery_threshold_percent=None, check_interval=1.0, max_session_permit=20, memory_wait_timeout=600,
    rate_limiter=None, monitor=None, *, memory_reader=None)``. See the module docstring.

    ``recovery_threshold_percent`` None means ``memory_threshold_percent - 5``. As in crawl4ai,
    :attr:`memory_pressure_mode` says whether new work is held back and :attr:`current_memory_percent`
    is the last reading."""

    def __init__(
        self,
        memory_threshold_percent: float = 90.0,
        critical_threshold_percent: float = 95.0,
        recovery_threshold_percent: float | None = None,
        check_interval: float = 1.0,
        max_session_permit: int = 20,
        memory_wait_timeout: float = 600.0,
        rate_limiter: RateLimiter | None = None,
        monitor: CrawlerMonitor | None = None,
        *,
        memory_reader: Callable[[], float] | None = None,
    ) -> None:
        if recovery_threshold_percent is None:
            recovery_threshold_percent = max(memory_threshold_percent - 5.0, memory_threshold_percent / 2)
        if not 0 < recovery_threshold_percent <= memory_threshold_percent <= critical_threshold_percent <= 100:
            raise ConfigurationError(
                "MemoryAdaptiveDispatcher thresholds need 0 < recovery <= threshold <= critical <= 100; got "
                f"recovery={recovery_threshold_percent}, threshold={memory_threshold_percent}, "
                f"critical={critical_threshold_percent}"
            )
        if check_interval <= 0:
            raise ConfigurationError(f"check_interval={check_interval!r}: must be > 0 seconds")
        if not isinstance(max_session_permit, int) or max_session_permit < 1:
            raise ConfigurationError(f"max_session_permit={max_session_permit!r}: must be an int >= 1")
        if memory_wait_timeout <= 0:
            raise ConfigurationError(f"memory_wait_timeout={memory_wait_timeout!r}: must be > 0 seconds")
        super().__init__(rate_limiter=rate_limiter, monitor=monitor)
        self.memory_threshold_percent = memory_threshold_percent
        self.critical_threshold_percent = critical_threshold_percent
        self.recovery_threshold_percent = recovery_threshold_percent
        self.check_interval = check_interval
        self.max_session_permit = max_session_permit
        self.memory_wait_timeout = memory_wait_timeout
        if memory_reader is None:
            memory_reader = monitor.system_memory if monitor is not None else SystemMemory()
        self.memory_reader: Callable[[], float] = memory_reader
        if monitor is not None and monitor.concurrency is None:
            monitor.concurrency = max_session_permit
        self.state: State = "normal"
        self.last_reading: float | None = None
        self.requeued = 0
        self._pressure_since: float | None = None
        self._inflight: dict[asyncio.Task[object], Lease] = {}
        self._cancelling: set[asyncio.Task[object]] = set()
        self._givebacks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._error: MemoryPressureError | None = None

    def __repr__(self) -> str:
        return (
            f"MemoryAdaptiveDispatcher(memory_threshold_percent={self.memory_threshold_percent}, "
            f"critical_threshold_percent={self.critical_threshold_percent}, "
            f"recovery_threshold_percent={self.recovery_threshold_percent}, "
            f"max_session_permit={self.max_session_permit}, state={self.state!r})"
        )

    @property
    def memory_pressure_mode(self) -> bool:
        """True while new work is held back (pressure or critical), as crawl4ai's flag."""
        return self.state != "normal"

    @property
    def current_memory_percent(self) -> float:
        """The last memory reading in percent (0.0 before the first), as crawl4ai's attribute."""
        return 0.0 if self.last_reading is None else self.last_reading

    # -- memory -------------------------------------------------------------------------------------

    def check_memory(self, now: float) -> State:
        """Take a reading and move between states; at critical, pull work in flight back."""
        pct = float(self.memory_reader())
        self.last_reading = pct
        old = self.state
        if pct >= self.critical_threshold_percent:
            new: State = "critical"
        elif pct >= self.memory_threshold_percent:
            new = "pressure"
        elif pct <= self.recovery_threshold_percent:
            new = "normal"
        else:
            new = "normal" if old == "normal" else "pressure"  # hysteresis: stay held until recovery
        self.state = new
        metrics.MEMORY_STATE.state(new)
        if new == "normal":
            self._pressure_since = None
        elif self._pressure_since is None:
            self._pressure_since = now
        elif now - self._pressure_since > self.memory_wait_timeout:
            self._error = MemoryPressureError(
                f"memory stayed at or above {self.memory_threshold_percent}% (now {pct:.1f}% of "
                f"{getattr(self.memory_reader, 'source', 'the limit')}) for more than "
                f"memory_wait_timeout={self.memory_wait_timeout:g} s; the run was stopped. Lower the "
                "concurrency (max_session_permit), raise the container's memory limit, or raise the thresholds."
            )
        if new == "critical":
            self._pull_back()
        if new != old or self._error is not None:
            self._wake.set()
        return new

    def _pull_back(self) -> None:
        tasks = [t for t in self._inflight if t not in self._cancelling and not t.done()]
        for task in tasks[1:]:  # keep the oldest: the crawl always moves
            self._cancelling.add(task)
            task.cancel()

    async def _watch(self, clock: Clock, main: asyncio.Task[object]) -> None:
        while True:
            await clock.sleep(self.check_interval)
            self.check_memory(clock.now())
            if self._error is not None:
                main.cancel()  # the driver may be waiting on the frontier: wake it with the error
                return

    # -- driving ------------------------------------------------------------------------------------

    async def _permit(self) -> None:
        while True:
            if self._error is not None:
                raise self._error
            if self.state == "normal" and len(self._inflight) < self.max_session_permit:
                return
            self._wake.clear()
            await self._wake.wait()

    async def _drive(self, state: _RunState, emit: Callable[[object], None]) -> None:
        self.state = "normal"
        self._error = None
        self._pressure_since = None
        self._wake = asyncio.Event()
        clock = state.clock
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        assert main is not None
        self.check_memory(clock.now())  # the first reading, before anything starts
        watcher = loop.create_task(self._watch(clock, main), name="crawlherd-memory-watch")
        try:
            while True:
                await self._permit()
                lease = await state.frontier.wait_next()
                if lease is None:
                    if not self._inflight:
                        break
                    self._wake.clear()
                    await self._wake.wait()  # something in flight may still go back to the frontier
                    continue
                if self.state != "normal":
                    await state.frontier.retry(lease)  # memory rose while we waited: not now
                    continue
                name = f"crawlherd-fetch-{lease.token}"
                task: asyncio.Task[object] = loop.create_task(self._handle(state, lease), name=name)
                self._inflight[task] = lease
                state.tasks.add(task)
                task.add_done_callback(lambda t, s=state, e=emit: self._finished(t, s, e))  # type: ignore[misc]
        finally:
            await cancel_and_wait(watcher)
            pending = list(self._inflight)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
            if self._givebacks:
                await asyncio.wait(list(self._givebacks))
            if self._error is not None and main.cancelling():
                main.uncancel()
                raise self._error from None

    def _finished(self, task: asyncio.Task[object], state: _RunState, emit: Callable[[object], None]) -> None:
        lease = self._inflight[task]
        self._wake.set()
        if task.cancelled():
            # Pulled back under memory pressure, or the run is closing: the URL goes back to the frontier.
            requeue = task in self._cancelling
            self._cancelling.discard(task)
            if requeue:
                fp = lease.request.fingerprint
                state.requeues[fp] = state.requeues.get(fp, 0) + 1
                self.requeued += 1
                if self.monitor is not None:
                    self.monitor.task_requeued()
            done = asyncio.get_running_loop().create_task(self._give_back(state, lease), name="crawlherd-requeue")
            self._givebacks.add(done)
            done.add_done_callback(lambda _t: self._gave_back(done, task))
            return
        self._release(task)
        exc = task.exception()
        if exc is not None:
            if isinstance(exc, BackendUnavailableError):  # not settled, nor put back: the next run puts it back
                self._keep_unreturned(state.frontier, lease)
            emit(exc)
            return
        result = task.result()
        if result is not None:
            emit(result)

    def _gave_back(self, done: asyncio.Task[None], task: asyncio.Task[object]) -> None:
        self._givebacks.discard(done)
        self._release(task)

    def _release(self, task: asyncio.Task[object]) -> None:
        self._inflight.pop(task, None)
        self._wake.set()
