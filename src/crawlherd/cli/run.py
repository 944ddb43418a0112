"""``crawlherd run``: dispatcher, relay and worker in one process, on the embedded defaults."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import click

from crawlherd._redact import redact_url
from crawlherd.brokers import open_broker
from crawlherd.cli._common import database_option, engine_for, settings_from
from crawlherd.cli._console import console_or_none, metrics_port_option, start_metrics
from crawlherd.cli._signals import stop_on_signals
from crawlherd.cli.worker import make_worker, worker_options
from crawlherd.db import upgrade
from crawlherd.service.embedded import RunProgress, run_embedded

__all__ = ["run"]


@click.command()
@database_option
@click.option("--broker-url", default=None, metavar="URL", help="Message broker; default: a table in the config DB.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between dispatch cycles.")
@click.option("--until-idle", is_flag=True,
              help="Exit once no target is due and every job dispatched has succeeded or is dead.")
@worker_options
@metrics_port_option
@click.option("--web-port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              envvar="CRAWLHERD_WEB_PORT", help="Serve the console on 127.0.0.1:PORT (a free port if taken).")
@click.option("--no-web", is_flag=True, help="Do not serve the console.")
@click.pass_context
def run(ctx: click.Context, /, database_url: str | None, broker_url: str | None, interval: float, until_idle: bool,
        metrics_port: int | None, web_port: int, no_web: bool, **options: Any) -> None:
    """The whole pipeline in one process: due targets -> outbox -> broker -> worker -> items.

    \b
    Embedded defaults: one SQLite file (crawlherd.db) holds the config, the broker's queue and the
    items; the frontier of pages is the file beside it (crawlherd-frontier.db).
    Set up:                          crawlherd targets import targets.toml
    Then:                            crawlherd run          (Ctrl+C stops cleanly)
    Scale out with `crawlherd dispatch` and `crawlherd worker` processes on PostgreSQL + RabbitMQ or
    Redis Streams, with a redis:// frontier.
    """
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url)
    target = settings.effective_broker_url

    def show(p: RunProgress) -> None:
        click.echo(
            f"\r{time.strftime('%H:%M:%S')} jobs {p.jobs}: {p.succeeded} done, {p.running} running, "
            f"{p.failed} retrying, {p.dead} dead  ",
            nl=False,
        )

    async def main() -> None:
        engine = engine_for(settings)
        try:
            await upgrade(engine)
            async with open_broker(target) as broker:
                w = make_worker(engine, broker, settings, **options)
                click.echo(
                    f"crawlherd run: {redact_url(settings.database_url)}, broker {redact_url(target)}, "
                    f"frontier {redact_url(w.frontier_url)}"
                )
                stop = asyncio.Event()
                start_metrics(metrics_port)
                async with w, console_or_none(engine, web_port, enabled=not no_web) as console:
                    if console is not None:
                        click.echo(f"console: {console.url}")
                    with stop_on_signals(stop):
                        p = await run_embedded(
                            engine, broker, w, stop=stop, interval=interval, until_idle=until_idle, on_progress=show
                        )
                click.echo(
                    f"\nstopped: {p.jobs} jobs, {p.succeeded} done, {p.dead} dead; {w.stats.items_new} new items"
                )
        finally:
            await engine.dispose()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())
