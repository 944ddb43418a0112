"""Graceful stop on SIGTERM / Ctrl+C for the long-running commands."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click

from crawlherd._aio import until_done

__all__ = ["stop_on_signals", "until_stopped"]

T = TypeVar("T")


async def until_stopped(source: AsyncIterator[T], stop: asyncio.Event) -> AsyncIterator[T]:
    """The items of ``source`` until ``stop`` is set (:func:`crawlherd._aio.until_done`)."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        async for item in until_done(source, stopped):
            yield item
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
