"""Graceful stop on SIGTERM / Ctrl+C for the long-running commands."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click

__all__ = ["stop_on_signals", "until_stopped"]

T = TypeVar("T")


async def until_stopped(source: AsyncIterator[T], stop: asyncio.Event) -> AsyncIterator[T]:
    """The items of ``source`` until ``stop`` is set: a pending wait for the next one is cancelled
    then, so a stop does not wait for a slow item."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            following = asyncio.ensure_future(anext(source))
            await asyncio.wait({following, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await following
                return
            try:
                yield following.result()
            except StopAsyncIteration:
                return
    finally:
        stopped.cancel()


@contextmanager
def stop_on_signals(stop: asyncio.Event, waiting_for: Callable[[], str] | None = None) -> Iterator[None]:
    """The first SIGTERM or Ctrl+C sets ``stop`` (finish what is in flight) and prints, at once,
    ``stopping… waiting for <waiting_for()> (Ctrl+C again to abort)`` on stderr; a second one cancels
    the current task (abort now) and says so. Outside the main thread (where no signal arrives) it
    does nothing."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and task is not None:
            click.echo("\naborting now", err=True)
            task.cancel()
            return
        what = waiting_for() if waiting_for is not None else "what is in flight"
        click.echo(f"\nstopping… waiting for {what} (Ctrl+C again to abort)", err=True)
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread: embedded elsewhere, the caller stops us
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
