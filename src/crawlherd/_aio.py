"""asyncio helpers the whole package shares."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, Self, TypeVar

__all__ = ["AsyncClosing", "Batched", "cancel_and_wait", "until_done", "wait_while_progressing"]

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")


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


async def wait_while_progressing(aw: Awaitable[T], timeout: float, progress: Callable[[], float]) -> T:
    """Await ``aw``, giving up (``TimeoutError``, ``aw`` cancelled) only once ``timeout`` seconds passed
    both since the wait began and since ``progress()`` (the ``time.monotonic()`` of the last sign of
    life of whatever ``aw`` waits for -- e.g. the last publisher confirm of a channel).

    A deadline for a stalled peer, not for a busy one: with thousands of publishes in flight the last
    confirms come long after their publish began, yet every one of them comes; timing those out would
    publish again what the broker kept."""
    task = asyncio.ensure_future(aw)
    began = time.monotonic()
    try:
        while True:
            left = max(began, progress()) + timeout - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"nothing moved for {timeout:g}s")
            done, _ = await asyncio.wait({task}, timeout=left)
            if done:
                return task.result()
    finally:
        if not task.done():
            await cancel_and_wait(task)


async def until_done(source: AsyncIterator[T], stop: asyncio.Future[Any]) -> AsyncIterator[T]:
    """The items of ``source`` until ``stop`` is done: a pending wait for the next one is cancelled
    then, so a stop does not wait for a slow item. Cancelled itself (an abort), it cancels that wait
    and lets it finish before it goes, so ``source`` can be closed afterwards (an async generator
    cannot be closed while it is still running)."""
    step: asyncio.Future[T] | None = None
    try:
        while not stop.done():
            step = asyncio.ensure_future(anext(source))
            await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
                return
            try:
                item = step.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if step is not None and not step.done():
            step.cancel()
            await asyncio.wait({step})


class Batched(Generic[A, R]):
    """Group commit for a round trip: ``await batched(arg)`` returns ``arg``'s result, got by one call
    of ``run(args)`` for every call made while the round trip before it was out (at most ``max_batch``
    a round trip). The first call goes out at once; under load, one round trip serves many callers.

    ``run(args)`` returns one result per arg, in order: a value, or an exception raised to that arg's
    caller alone; an exception ``run`` raises goes to every caller of the batch. A caller cancelled
    while it waits does not stop the round trip it is part of; ``orphan(result)``, when given, is
    awaited for a result whose caller has gone (a lease to give back, say). :meth:`close` cancels the
    round trip running and every caller still waiting."""

    def __init__(
        self,
        run: Callable[[list[A]], Awaitable[list[R | BaseException]]],
        *,
        max_batch: int = 500,
        orphan: Callable[[R], Awaitable[object]] | None = None,
        name: str = "crawlherd-batched",
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch!r}: must be >= 1")
        self._run = run
        self._max = max_batch
        self._orphan = orphan
        self._name = name
        self._pending: list[tuple[A, asyncio.Future[R]]] = []
        self._running: list[tuple[A, asyncio.Future[R]]] = []
        self._task: asyncio.Task[None] | None = None
        #: Round trips made, and the calls they served.
        self.batches = 0
        self.calls = 0

    async def __call__(self, arg: A) -> R:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[R] = loop.create_future()
        self._pending.append((arg, done))
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._drain(), name=self._name)
        try:
            return await done
        except asyncio.CancelledError:
            # cancelled after its result was set: nobody else will use it
            if self._orphan is not None and done.done() and not done.cancelled() and done.exception() is None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(self._orphan(done.result()))
            raise

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[: self._max], self._pending[self._max :]
                self._running = [(a, f) for a, f in batch if not f.done()]
                if self._running:
                    await self._one(self._running)
                self._running = []
        finally:  # cancelled (close): no caller is left hanging
            for _, f in (*self._running, *self._pending):
                f.cancel()
            self._running, self._pending = [], []

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

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        for _, f in (*self._running, *self._pending):  # a round trip cancelled before it began
            f.cancel()
        self._running, self._pending = [], []
