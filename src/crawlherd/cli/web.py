"""``crawlherd web``: the operator's console on the config DB."""

from __future__ import annotations

import asyncio
import contextlib

import click

from crawlherd._redact import redact_url
from crawlherd.cli._common import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.cli._console import metrics_port_option, start_metrics
from crawlherd.cli._signals import stop_on_signals

__all__ = ["web"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="CRAWLHERD_WEB_HOST",
              help="Address to bind; anything but loopback needs a user (`crawlherd users add`).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, envvar="CRAWLHERD_WEB_PORT")
@database_option
@metrics_port_option
@click.pass_context
def web(ctx: click.Context, host: str, port: int, database_url: str | None, metrics_port: int | None) -> None:
    """Serve the console: overview, websites and targets (run now, schedule preview), jobs, dead
    letters, items, frontier, lineage ("why didn't it run?") and the audit trail."""
    from crawlherd.web.server import serve_console

    settings = settings_from(ctx, database_url=database_url)

    async def main() -> None:
        engine = engine_for(settings)
        try:
            await ensure_migrated(engine)
            async with serve_console(engine, host=host, port=port) as console:
                stop = asyncio.Event()
                with stop_on_signals(stop):
                    click.echo(f"console: {console.url} on {redact_url(settings.database_url)} (Ctrl+C stops)")
                    start_metrics(metrics_port)
                    await stop.wait()
        finally:
            await engine.dispose()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())
