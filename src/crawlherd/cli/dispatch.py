"""``crawlherd dispatch``: the dispatch service (due targets -> outbox -> broker)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import click

from crawlherd._redact import redact_url
from crawlherd.brokers import open_broker
from crawlherd.cli._common import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.cli._console import metrics_port_option, start_metrics
from crawlherd.cli._signals import stop_on_signals
from crawlherd.service.dispatch_service import DispatchService, RelayResult, TickResult

__all__ = ["dispatch"]


@click.command()
@click.option("--once", is_flag=True, help="Dispatch what is due, relay what is pending, then exit.")
@click.option(
    "--interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="Seconds between cycles."
)
@database_option
@click.option("--broker-url", default=None, metavar="URL", help="Message broker; default: CRAWLHERD_BROKER_URL.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True, help="Targets per tick.")
@click.option(
    "--lease", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
    help="Outbox lease (seconds): how long a relay holds a row it publishes; a relay round may take half of it."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@metrics_port_option
@click.pass_context
def dispatch(
    ctx: click.Context,
    once: bool,
    interval: float,
    database_url: str | None,
    broker_url: str | None,
    batch_size: int,
    lease: float,
    quiet: bool,
    metrics_port: int | None,
) -> None:
    """Publish one job per scrape target per slot. Run as many as you like: they share the work.

    Stops cleanly on SIGTERM or Ctrl+C (a second Ctrl+C aborts; leased rows are then published again
    by another dispatcher once their lease runs out).
    """
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url)
    broker_target = settings.effective_broker_url

    def progress(tick: TickResult, relay: RelayResult) -> None:
        if not quiet:
            stamp = time.strftime("%H:%M:%S")
            click.echo(
                f"{stamp} dispatch: {tick.inserted} job(s) from {tick.targets} due target(s); "
                f"published {relay.published}, failed {relay.failed}"
            )

    async def main() -> None:
        engine = engine_for(settings)
        try:
            await ensure_migrated(engine)
            start_metrics(metrics_port)
            async with open_broker(broker_target) as broker:
                dispatcher = DispatchService(
                    engine, broker, batch_size=batch_size, lease=lease, broker_label=redact_url(broker_target)
                )
                if not quiet:
                    click.echo(
                        f"dispatcher {dispatcher.owner}: {redact_url(settings.database_url)} -> "
                        f"{redact_url(broker_target)}" + (" (once)" if once else f" every {interval:g}s")
                    )
                # First signal: finish the current batch and stop. Second: abort (the relay still
                # marks what the broker confirmed and releases the rest).
                stop = asyncio.Event()
                with stop_on_signals(stop):
                    if once:
                        tick, relay = await dispatcher.run_once(stop)
                        progress(tick, relay)
                        return
                    await dispatcher.run(interval=interval, stop=stop, on_cycle=progress)
                if not quiet:
                    click.echo("dispatcher stopped")
        finally:
            await engine.dispose()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())
