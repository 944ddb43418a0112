"""``crawlherd web``: the operator's console on the config DB."""

from __future__ import annotations

import asyncio
import contextlib

import click

from crawlherd._redact import redact_url
from crawlherd.cli._common import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.cli._console import metrics_port_option, start_metrics
from crawlherd.cli._signals import stop_on_signals
from crawlherd.duration import parse_duration
from crawlherd.errors import CrawlherdError

__all__ = ["web"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="CRAWLHERD_WEB_HOST",
              help="Address to bind; anything but loopback needs a user (`crawlherd users add`).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, envvar="CRAWLHERD_WEB_PORT")
@click.option("--session-idle", default="30m", show_default=True, envvar="CRAWLHERD_WEB_SESSION_IDLE",
              metavar="DURATION", help="A console session unused this long ends.")
@click.option("--session-max", default="12h", show_default=True, envvar="CRAWLHERD_WEB_SESSION_MAX",
              metavar="DURATION", help="A console session ends this long after its login, however busy.")
@database_option
@metrics_port_option
@click.pass_context
def web(ctx: click.Context, host: str, port: int, session_idle: str, session_max: str, database_url: str | None,
        metrics_port: int | None) -> None:
    """Serve the console: overview, websites and targets (run now, schedule preview), jobs, dead
    letters, items, frontier, lineage ("why didn't it run?"), the audit trail and, for admins, users."""
    from crawlherd.console.sessions import SessionPolicy
    from crawlherd.web.server import serve_console

    settings = settings_from(ctx, database_url=database_url)
    try:
        policy = SessionPolicy(idle=parse_duration(session_idle).total_seconds(),
                               absolute=parse_duration(session_max).total_seconds())
    except CrawlherdError as exc:
        raise click.BadParameter(str(exc), param_hint="--session-idle / --session-max") from None

    async def main() -> None:
        engine = engine_for(settings)
        try:
            await ensure_migrated(engine)
            async with serve_console(engine, host=host, port=port, session_policy=policy) as console:
                stop = asyncio.Event()
                with stop_on_signals(stop):
                    click.echo(f"console: {console.url} on {redact_url(settings.database_url)} (Ctrl+C stops)")
                    start_metrics(metrics_port)
                    await stop.wait()
        finally:
            await engine.dispose()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())
