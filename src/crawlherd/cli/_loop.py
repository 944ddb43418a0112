"""The event loop the long-running commands (``crawl``, ``worker``, ``run``, ``dispatch``) run on:
uvloop when it is installed (the ``uvloop`` extra), else asyncio's own; ``--loop`` / the
``event_loop`` setting choose. Kept apart from ``_common`` so that ``crawlherd crawl`` does not
import the config DB's modules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from crawlherd._memtrace import interval_from_env, traced

__all__ = ["EVENT_LOOPS", "loop_option", "run_async"]

T = TypeVar("T")
log = logging.getLogger("crawlherd.cli")

#: The choices of ``--loop`` and of the ``event_loop`` setting.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")

loop_option = click.option(
    "--loop", "event_loop", type=click.Choice(EVENT_LOOPS), default=None,
    help="Event loop: auto runs on uvloop when it is installed (crawlherd[uvloop]), else on asyncio's.  "
    "[default: setting event_loop, auto]",
)


def run_async(main: Coroutine[Any, Any, T], event_loop: str = "auto") -> T:
    """``asyncio.run(main)`` on the chosen event loop: ``uvloop`` (a clear error when it is not
    installed), ``asyncio``, or ``auto`` -- uvloop when it can be imported, else asyncio's own loop.
    The loop used is logged (``-v``)."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                main.close()
                raise click.ClickException(
                    "--loop uvloop: uvloop is not installed (pip install 'crawlherd[uvloop]'), or use --loop auto"
                ) from None
        else:
            factory = uvloop.new_event_loop
    log.info("event loop: %s", "uvloop" if factory is not None else "asyncio")
    trace_every = interval_from_env()
    if trace_every is not None:  # CRAWLHERD_TRACEMALLOC=<seconds>: what grows (docs/operations.md)
        main = traced(main, trace_every)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
