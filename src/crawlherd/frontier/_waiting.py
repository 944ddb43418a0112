"""``wait_next()``, async iteration and waiting for room in a full frontier, shared by every backend.

A backend provides ``next_request()`` and ``_pending_and_wakeup()`` (is anything queued or in flight,
and when does the next timer, delayed request or lease expiry fall due) and calls ``_notify()`` when
its state changes; waiting is then the same everywhere: until a lease is ready, the frontier is idle
or closed, or the timeout passes -- sleeping on the frontier's clock, so tests drive it with FakeClock.
An enqueue that finds the frontier full (``full_policy="block"``) waits in ``_wait_for_room()`` until
the backend calls ``_room_made()`` (a request was leased).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from crawlherd.clock import Clock
from crawlherd.errors import QueueFullError
from crawlherd.frontier.base import Lease

__all__ = ["WaitingMixin"]


class WaitingMixin:
    """Mix into a backend class; see the module docstring."""

    _clock: Clock
    #: The backend's FrontierOptions (``full_policy``, ``max_size``).
    options: Any
    _closed: bool
    _changed: asyncio.Future[None] | None = None
    _room: asyncio.Future[None] | None = None
    #: Also look again every this many seconds: state that other processes change (Redis).
    _poll: float | None = None

    async def next_request(self) -> Lease | None:
        raise NotImplementedError

    async def _pending_and_wakeup(self) -> tuple[bool, float | None]:
        """(anything queued or in flight, the time something next falls due or None)."""
        raise NotImplementedError

    def _notify(self) -> None:
        """Wake the waiters: something was queued, settled or unblocked."""
        _wake(self._changed)
        self._changed = None

    def _begin_close(self) -> bool:
        """Mark the frontier closed and wake its waiters; False when it was closed already."""
        if self._closed:
            return False
        self._closed = True
        self._notify()
        return True

    async def _when_full(self, url: str, more: int = 0, *, queued: int | None = None) -> None:
        """The frontier is full: ``url`` (and the ``more`` requests after it) were not queued. Raise
        :class:`QueueFullError` under ``full_policy="raise"``; else wait for room."""
        options = self.options
        if options.full_policy == "raise":
            size = f"max_size={options.max_size}" if queued is None else f"{queued} >= max_size={options.max_size}"
            which = f"{url} and the {more} request(s) after it were" if more else f"{url} was"
            raise QueueFullError(f"frontier is full ({size}); {which} not queued and may be enqueued again later")
        await self._wait_for_room()

    def _room_made(self) -> None:
        """Wake the enqueuers waiting for room: a request left the queue."""
        _wake(self._room)
        self._room = None

    async def _wait_for_room(self) -> None:
        """Until :meth:`_room_made` is called -- or, when other processes share the store, at most
        ``_poll`` seconds (they make room without telling this one)."""
        if self._room is None or self._room.done():
            self._room = asyncio.get_running_loop().create_future()
        room = asyncio.shield(self._room)  # one waiter cancelled must not cancel the others
        if self._poll:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await room
        else:
            await room

    async def wait_next(self, timeout: float | None = None) -> Lease | None:
        clock = self._clock
        deadline = None if timeout is None else clock.now() + timeout
        while True:
            if self._closed:
                return None
            lease = await self.next_request()
            if lease is not None:
                return lease
            busy, wake = await self._pending_and_wakeup()
            if not busy:
                return None
            now = clock.now()
            if deadline is not None:
                if now >= deadline:
                    return None
                wake = deadline if wake is None else min(wake, deadline)
            if self._changed is None or self._changed.done():
                self._changed = asyncio.get_running_loop().create_future()
            changed = self._changed
            timers: list[asyncio.Future[None]] = []
            if self._poll:
                timers.append(asyncio.ensure_future(asyncio.sleep(self._poll)))
            if wake is not None:
                timers.append(asyncio.ensure_future(clock.sleep(max(0.0, wake - now))))
            try:
                await asyncio.wait({changed, *timers}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in timers:
                    t.cancel()

    async def __aiter__(self) -> AsyncIterator[Lease]:
        while (lease := await self.wait_next()) is not None:
            yield lease


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)
