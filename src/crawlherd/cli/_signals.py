"""Graceful stop on SIGTERM / Ctrl+C for the long-running commands."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["stop_on_signals"]


@contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """The first SIGTERM or Ctrl+C sets ``stop`` (finish what is in flight); a second one cancels the
    current task (abort now). Outside the main thread (where no signal arrives) it does nothing."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def on_signal() -> None:
        if stop.is_set() and task is not None:
            task.cancel()
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
