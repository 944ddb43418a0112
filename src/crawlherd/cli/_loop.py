"""The event loop the long-running commands (``crawl``, ``worker``, ``run``, ``dispatch``) run on:
uvloop when it is installed (the ``uvloop`` extra), else asyncio's own; ``--loop`` / the
``event_loop`` setting choose. Kept apart from ``_common`` so that ``crawlherd crawl`` does not
import the config DB's modules."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from crawlherd._memtrace import interval_from_env, traced

__all__ = ["EVENT_LOOPS", "GC_THRESHOLDS", "loop_option", "own_the_process", "run_async", "service_up"]

T = TypeVar("T")
log = logging.getLogger("crawlherd.cli")

#: The choices of ``--loop`` and of the ``event_loop`` setting.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")

loop_option = click.option(
    "--loop", "event_loop", type=click.Choice(EVENT_LOOPS), default=None,
    help="Event loop: auto runs on uvloop when it is installed (crawlherd[uvloop]), else on asyncio's.  "
    "[default: setting event_loop, auto]",
)


#: The collector's thresholds in a ``crawlherd`` process (Python's: 700, 10, 10). At Python's, a worker ran a
#: young collection every ~6 pages, an older one every ~60, and the collector took 11% of its CPU
#: (``bench/worker.py``), much of it walking again and again the objects start-up made.
GC_THRESHOLDS = (10_000, 20, 20)

_owned = False


def own_the_process() -> None:
    """The ``crawlherd`` command runs as its own process (the console script, ``python -m crawlherd``):
    :func:`run_async` may then tune the garbage collector, which is the process's. Not called when the
    command is invoked in another program's process (a test's ``CliRunner``, an embedding)."""
    global _owned
    _owned = True


def _tune_gc() -> None:
    """In a process of its own (see :func:`own_the_process`), before its loop starts: what start-up made
    (modules, classes, settings, schemas -- kept for the process's life) is moved out of the collector's
    sight (``gc.freeze``), and young collections run less often (:data:`GC_THRESHOLDS`). Cyclic garbage is
    still collected, in larger batches; a frozen object that ends in a reference cycle is not (bounded by
    what start-up made). ``CRAWLHERD_GC=default`` leaves Python's collector as it is."""
    if _tuned():
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)


def service_up() -> None:
    """A service (``worker``, ``run``) has opened its stores: what that made (engines, metadata, the
    frontier's scripts) is kept for its life too, out of the collector's sight like start-up's."""
    if _tuned():
        gc.freeze()


def _tuned() -> bool:
    return _owned and os.environ.get("CRAWLHERD_GC", "").lower() != "default"


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
    _tune_gc()
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
