"""``crawlherd dispatch``: the dispatch service (due targets -> outbox -> broker)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import time
from collections.abc import Iterator

import click

from crawlherd._redact import redact_url
from crawlherd._resilience import watch
from crawlherd.cli._common import Output, periodic_status, settings_from
from crawlherd.cli._loop import loop_option, run_async
from crawlherd.cli._service import service_options, service_stores
from crawlherd.cli._signals import stop_on_signals
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService, RelayResult, TickResult

__all__ = ["dispatch"]

#: Allocations between two young garbage collections in the dispatcher (Python's default: 700).
GC_YOUNG_THRESHOLD = 10_000


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """While the dispatcher runs: the modules, classes and settings loaded at start-up live as long as
    the process -- the garbage collector stops traversing them (``gc.freeze()``) -- and the young
    generation is collected every :data:`GC_YOUNG_THRESHOLD` allocations. A relay allocates a few
    dozen short-lived objects per job; with the defaults a fifth of ``dispatch --once``'s CPU went to
    collections that traversed the whole heap and found nothing. Restored afterwards (the command
    may run inside another program: a test, a notebook); at the process's exit the heap is frozen
    again, so that the interpreter's last collection does not walk it only to free it anyway."""
    atexit.unregister(_freeze_at_exit)  # once per process, however many runs
    atexit.register(_freeze_at_exit)
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _freeze_at_exit() -> None:
    gc.freeze()


@click.command()
@click.option("--once", is_flag=True, help="Dispatch what is due, relay what is pending, then exit.")
@click.option("--interval", "dispatch_interval", type=click.FloatRange(min=0.01), default=None,
              help="Seconds between cycles.  [default: setting dispatch_interval, 1]")
@click.option("--batch-size", "dispatch_batch_size", type=click.IntRange(1, 100_000), default=None,
              help="Targets per tick.  [default: setting dispatch_batch_size, 5000]")
@click.option(
    "--lease", "dispatch_lease", type=click.FloatRange(min=1.0), default=None,
    help="Outbox lease (seconds): how long a relay holds a row it publishes; a relay round may take half of it.  "
    "[default: setting dispatch_lease, 60]",
)
@loop_option
@service_options
@click.pass_context
def dispatch(
    ctx: click.Context,
    once: bool,
    dispatch_interval: float | None,
    database_url: str | None,
    broker_url: str | None,
    dispatch_batch_size: int | None,
    dispatch_lease: float | None,
    event_loop: str | None,
    quiet: bool,
    as_json: bool,
    metrics_port: int | None,
) -> None:
    """Publish one job per scrape target per slot. Run as many as you like: they share the work.

    Stops cleanly on SIGTERM or Ctrl+C (a second Ctrl+C aborts; leased rows are then published again
    by another dispatcher once their lease runs out).
    """
    settings = settings_from(
        ctx, database_url=database_url, broker_url=broker_url, dispatch_interval=dispatch_interval,
        dispatch_batch_size=dispatch_batch_size, dispatch_lease=dispatch_lease, event_loop=event_loop,
    )
    interval = settings.dispatch_interval
    broker_target = settings.effective_broker_url

    out = Output(quiet=quiet, as_json=as_json)
    ticks, relays = [TickResult()], [RelayResult()]  # since the start, for the status line

    def line(tick: TickResult, relay: RelayResult) -> str:
        return (
            f"{time.strftime('%H:%M:%S')} dispatch: {tick.inserted} job(s) from {tick.targets} due target(s); "
            f"published {relay.published}, failed {relay.failed}"
        )

    def progress(tick: TickResult, relay: RelayResult) -> None:
        ticks[0], relays[0] = ticks[0] + tick, relays[0] + relay
        if not (quiet or as_json):
            out.end_live()
            click.echo(line(tick, relay))

    def status(outages: str) -> str:
        text = (f"{time.strftime('%H:%M:%S')} dispatch since the start: {ticks[0].inserted} job(s) from "
                f"{ticks[0].targets} due target(s); published {relays[0].published}, failed {relays[0].failed}")
        return f"{text}; {outages}" if outages else text

    async def main() -> None:
        async with service_stores(settings, out, metrics_port=metrics_port) as (engine, broker, broker_down):
            dispatcher = DispatchService(
                engine,
                broker,
                DispatchOptions(
                    batch_size=settings.dispatch_batch_size,
                    lease=settings.dispatch_lease,
                    broker_label=redact_url(broker_target),
                ),
            )
            # First signal: finish the current batch and stop. Second: abort (the relay still
            # marks what the broker confirmed and releases the rest). Before the banner: Ctrl+C from
            # then on is clean.
            stop = asyncio.Event()
            cycle = "the current dispatch cycle (its claimed outbox rows are published or released)"
            with settled_heap(), stop_on_signals(stop, lambda: cycle):
                if not (quiet or as_json):
                    click.echo(
                        f"dispatcher {dispatcher.owner}: {redact_url(settings.database_url)} -> "
                        f"{redact_url(broker_target)}" + (" (once)" if once else f" every {interval:g}s")
                    )
                if broker_down is not None:  # said now, and on every status line until it is back
                    dispatcher.outages.down("broker", broker_down)
                if once:
                    tick, relay = await dispatcher.run_once(stop)
                    data = {"due_targets": tick.targets, "jobs": tick.inserted,
                            "published": relay.published, "failed": relay.failed}
                    out.result(line(tick, relay), data)
                    return
                # With nothing due the relay does not call the broker: ask it, so that its outage is
                # said, on the status lines, until it ends.
                probe = asyncio.create_task(
                    watch(dispatcher.outages, "broker", broker.pending, every=min(5.0, settings.status_interval),
                          stop=stop, down_at_start=broker_down is not None), name="dispatch-broker-watch")
                try:
                    async with periodic_status(out, lambda: status(dispatcher.outages.describe()),
                                               settings.status_interval):
                        await dispatcher.run(interval=interval, stop=stop, on_cycle=progress)
                finally:
                    stop.set()
                    await probe
            if not (quiet or as_json):
                click.echo("dispatcher stopped")

    with contextlib.suppress(asyncio.CancelledError):
        run_async(main(), settings.event_loop)
