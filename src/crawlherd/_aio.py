"""asyncio helpers the whole package shares."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self, TypeVar

__all__ = ["AsyncClosing", "awaiting", "cancel_and_wait", "first_of", "pipe", "retrieved", "until_done",
           "wait_while_progressing"]

T = TypeVar("T")


class AsyncClosing:
    """``async with obj:`` closes ``obj`` on the way out (``await obj.close()``). Entering does nothing
    more here; a class that opens something on entry overrides ``__aenter__``."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        raise NotImplementedError


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has finished. Its own ``CancelledError`` is
    absorbed; the caller's is not: when the caller is being cancelled while it waits, that
    cancellation goes on (``suppress(CancelledError)`` around the await would swallow it)."""
    if task is None:
        return
    current = asyncio.current_task()
    # Cancellations of the caller asked *before* this call (cleanup in a ``finally`` after the caller
    # was cancelled) are not this wait's: only one asked while it waits goes on.
    before = current.cancelling() if current is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if current is not None and current.cancelling() > before:
            raise


#: Event-loop turns given, when a stall deadline has passed, to answers already received but not yet
#: read (the socket's callback, the client's reader task, the waiter it wakes).
_CATCH_UP_TURNS = 5


def retrieved(fut: asyncio.Future[Any]) -> None:
    """A done callback: mark ``fut``'s exception seen -- its awaiters may all have gone (cancelled, or a
    shared future nobody waits on any more), and an exception never retrieved is logged at exit."""
    if not fut.cancelled():
        fut.exception()


async def first_of(*aws: Awaitable[object]) -> None:
    """Wait for the first of ``aws``; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


async def wait_while_progressing(aw: Awaitable[T], timeout: float, progress: Callable[[], float]) -> T:
    """Await ``aw``, giving up (``TimeoutError``, ``aw`` cancelled) only once ``timeout`` seconds passed
    both since the wait began and since ``progress()`` (the ``time.monotonic()`` of the last sign of
    life of whatever ``aw`` waits for -- e.g. the last publisher confirm of a channel).

    A deadline for a stalled peer, not for a busy one: with thousands of publishes in flight the last
    confirms come long after their publish began, yet every one of them comes; timing those out would
    publish again what the broker kept. ``aw`` runs in the caller's task under one timer that re-arms
    itself while there is progress (no task of its own: a relay awaits thousands of these a second)."""
    watch: _StallWatch | None = None
    try:
        async with asyncio.timeout(None) as limit:
            watch = _StallWatch(limit, timeout, progress)
            try:
                return await aw
            finally:
                watch.stop()
    except TimeoutError:
        if watch is not None and watch.stalled:
            raise TimeoutError(f"nothing moved for {timeout:g}s") from None
        raise
    raise AssertionError("unreachable")  # pragma: no cover - asyncio.timeout swallows nothing


class _StallWatch:
    """The timer of :func:`wait_while_progressing`: expires ``limit`` once ``timeout`` seconds passed
    since it began and since ``progress()``. No closure: its handle refers to it, it drops the handle
    when stopped -- no cycle left for the garbage collector (thousands a second)."""

    __slots__ = ("began", "handle", "limit", "progress", "stalled", "timeout", "turns")

    def __init__(self, limit: asyncio.Timeout, timeout: float, progress: Callable[[], float]) -> None:
        self.limit, self.timeout, self.progress = limit, timeout, progress
        self.began = time.monotonic()
        self.stalled = False
        self.turns = 0
        self.handle: asyncio.Handle | None = asyncio.get_running_loop().call_later(timeout, self.check)

    def check(self) -> None:
        if self.handle is None:
            return
        loop = asyncio.get_running_loop()
        left = max(self.began, self.progress()) + self.timeout - time.monotonic()
        if left > 0:
            self.turns = 0
            self.handle = loop.call_later(left, self.check)
        elif self.turns < _CATCH_UP_TURNS:
            # Our own process may have been the one stalled (a busy machine): let the answers that
            # piled up meanwhile be read before calling the peer silent.
            self.turns += 1
            self.handle = loop.call_soon(self.check)
        else:
            self.stalled = True
            self.handle = None
            self.limit.reschedule(loop.time())  # cancels the wait now: TimeoutError on the way out

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


def awaiting(task: asyncio.Task[Any]) -> str:
    """Where ``task`` waits: its chain of awaits, outermost first (``func file:line -> ...``)."""
    where: list[str] = []
    step: Any = task.get_coro()
    while step is not None and len(where) < 40:
        frame = getattr(step, "cr_frame", None) or getattr(step, "ag_frame", None) or getattr(step, "gi_frame", None)
        if frame is not None:
            where.append(f"{frame.f_code.co_name} {frame.f_code.co_filename}:{frame.f_lineno}")
        step = getattr(step, "cr_await", None) or getattr(step, "ag_await", None) or getattr(step, "gi_yieldfrom", None)
    return " -> ".join(where) or repr(task)


async def until_done(source: AsyncIterator[T], stop: asyncio.Future[Any]) -> AsyncIterator[T]:
    """The items of ``source`` until ``stop`` is done: a pending wait for the next one is cancelled
    then, so a stop does not wait for a slow item. Cancelled itself (an abort), the wait ends with it,
    so ``source`` can be closed afterwards (an async generator cannot be closed while it is still running).

    The wait runs in the caller's task (no task per item): a stop while it is pending cancels the
    caller's task, as ``asyncio.timeout`` does, and the cancellation is taken back here. ``source``
    must let a cancellation through (asyncio's rule), as crawlherd's streams do."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("until_done must run inside an asyncio task")
    waiting = stopped = False

    def on_stop(_: object) -> None:
        nonlocal stopped
        if waiting and not stopped:
            stopped = True
            task.cancel()

    stop.add_done_callback(on_stop)
    try:
        while not stop.done():
            before = task.cancelling()
            waiting = True
            try:
                item = await anext(source)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if stopped and task.uncancel() <= before:
                    return  # the stop's own cancellation: taken back
                raise
            finally:
                waiting = False
            if stopped:  # the source finished before the stop's cancellation reached it
                task.uncancel()
                return
            yield item
    finally:
        stop.remove_done_callback(on_stop)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until the end or a connection error, then close ``writer`` (one
    direction of a TCP relay: the loopback proxies, the browser's SOCKS5 relay)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
