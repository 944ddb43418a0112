"""``SemaphoreDispatcher``: a fixed number of requests in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from crawlherd.crawler.concurrency.base import BaseDispatcher, _RunState
from crawlherd.errors import BackendUnavailableError, ConfigurationError

if TYPE_CHECKING:
    from crawlherd.crawler.concurrency.monitor import CrawlerMonitor
    from crawlherd.crawler.concurrency.rate_limiter import RateLimiter

__all__ = ["SemaphoreDispatcher"]


class SemaphoreDispatcher(BaseDispatcher):
    """``SemaphoreDispatcher(semaphore_count=5, rate_limiter=None, monitor=None)``: at most
    ``semaphore_count`` requests in flight.

    Implemented as ``semaphore_count`` workers that each lease, fetch and settle in a loop -- the same
    bound as a semaphore, without a task per page.
    """

    def __init__(
        self,
        semaphore_count: int = 5,
        rate_limiter: RateLimiter | None = None,
        monitor: CrawlerMonitor | None = None,
    ) -> None:
        if not isinstance(semaphore_count, int) or semaphore_count < 1:
            raise ConfigurationError(f"SemaphoreDispatcher semaphore_count={semaphore_count!r}: must be an int >= 1")
        super().__init__(rate_limiter=rate_limiter, monitor=monitor)
        self.semaphore_count = semaphore_count
        if monitor is not None and monitor.concurrency is None:
            monitor.concurrency = semaphore_count

    def __repr__(self) -> str:
        return f"SemaphoreDispatcher(semaphore_count={self.semaphore_count})"

    async def _drive(self, state: _RunState, emit: Callable[[object], None]) -> None:
        async with asyncio.TaskGroup() as tg:
            for i in range(self.semaphore_count):
                state.tasks.add(tg.create_task(self._worker(state, emit), name=f"crawlherd-worker-{i}"))

    async def _worker(self, state: _RunState, emit: Callable[[object], None]) -> None:
        wait_next = state.frontier.wait_next
        handle = self._handle
        while (lease := await wait_next()) is not None:
            try:
                result = await handle(state, lease)
            except asyncio.CancelledError:
                await self._give_back(state, lease)
                raise
            except BackendUnavailableError:  # not settled, nor put back: the next run puts it back
                self._keep_unreturned(state.frontier, lease)
                raise
            if result is not None:
                emit(result)
