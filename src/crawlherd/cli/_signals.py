"""Graceful stop on SIGTERM / Ctrl+C for the long-running commands."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click

from crawlherd._aio import awaiting, until_done

__all__ = ["awaiting", "stop_on_signals", "until_stopped"]

T = TypeVar("T")

log = logging.getLogger("crawlherd.cli")

#: Seconds a stop may take beyond what the command waits for before it says what it still waits on.
OVERDUE = 30.0


async def until_stopped(source: AsyncIterator[T], stop: asyncio.Event) -> AsyncIterator[T]:
    """The items of ``source`` until ``stop`` is set (:func:`crawlherd._aio.until_done`)."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        async for item in until_done(source, stopped):
            yield item
    finally:
        stopped.cancel()


def _still_stopping(after: float) -> None:
    """A stop that takes far longer than it should: say what every task still waits on (a hang to report)."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    log.warning("still stopping after %.0f s; %d task(s) still running:\n%s", after, len(tasks),
                "\n".join(f"  {t.get_name()}: {awaiting(t)}" for t in tasks))


@contextmanager
def stop_on_signals(
    stop: asyncio.Event, waiting_for: Callable[[], str] | None = None, *, overdue: float = OVERDUE
) -> Iterator[None]:
    """The first SIGTERM or Ctrl+C sets ``stop`` (finish what is in flight) and prints, at once,
    ``stopping… waiting for <waiting_for()> (Ctrl+C again to abort)`` on stderr; a second one cancels
    the current task (abort now) and says so. A stop still under way ``overdue`` seconds later logs
    what each task still waits on (a hang, to report). Outside the main thread (where no signal
    arrives) it does nothing."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    report: list[asyncio.TimerHandle] = []

    def on_signal() -> None:
        if stop.is_set() and task is not None:
            click.echo("\naborting now", err=True)
            task.cancel()
            return
        what = waiting_for() if waiting_for is not None else "what is in flight"
        click.echo(f"\nstopping… waiting for {what} (Ctrl+C again to abort)", err=True)
        stop.set()
        report.append(loop.call_later(overdue, _still_stopping, overdue))

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread: embedded elsewhere, the caller stops us
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        yield
    finally:
        for handle in report:
            handle.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
