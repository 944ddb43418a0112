"""``crawlherd run``: dispatcher, relay and worker in one process, on the embedded defaults."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import click

from crawlherd._redact import redact_url
from crawlherd.cli._common import (
    Output,
    Rates,
    broker_for_service,
    config_db,
    periodic_status,
    settings_from,
    stats_dump,
)
from crawlherd.cli._console import console_options, console_or_none, start_metrics
from crawlherd.cli._loop import run_async, service_up
from crawlherd.cli.worker import run_options, worker_pool_size, worker_started, worker_statistics, worker_status
from crawlherd.db import upgrade
from crawlherd.dispatch.embedded import run_embedded
from crawlherd.dispatch.outbox import TickResult
from crawlherd.dispatch.relay import RelayResult
from crawlherd.worker.worker import Worker

__all__ = ["run"]


@click.command()
@run_options
@click.option("--interval", "dispatch_interval", type=click.FloatRange(min=0.05), default=None,
              help="Seconds between dispatch cycles.  [default: setting dispatch_interval, 1]")
@click.option("--until-idle", is_flag=True,
              help="Exit once no target is due and every job dispatched has succeeded or is dead.")
@console_options
@click.pass_context
def run(ctx: click.Context, /, database_url: str | None, broker_url: str | None, until_idle: bool,
        metrics_port: int | None, console_port: int, no_console: bool, quiet: bool, as_json: bool,
        **options: Any) -> None:
    """The whole pipeline in one process: due targets -> outbox -> broker -> worker -> items.

    \b
    Embedded defaults: one SQLite file (crawlherd.db) holds the config, the broker's queue and the
    items; the frontier of pages is the file beside it (crawlherd-frontier.db).
    Set up:                          crawlherd targets import targets.toml
    Then:                            crawlherd run          (Ctrl+C stops cleanly)
    Watch it in the console:         the URL it prints (http://127.0.0.1:8080/; --console-port,
                                     --no-console)
    Scale out with `crawlherd dispatch` and `crawlherd worker` processes on PostgreSQL + RabbitMQ or
    Redis Streams, with a redis:// frontier.

    \b
    Output: a status line (pages/min, items/min, jobs) redrawn on a terminal, else a plain line every
    status_interval seconds; at the end, the statistics (--json: as one JSON object on stdout).
    """
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url, **options)
    target = settings.effective_broker_url
    out = Output(quiet=quiet, as_json=as_json)
    # this run's dispatching (the config DB may hold other runs')
    ticks, relays = [TickResult()], [RelayResult()]

    def count(tick: TickResult, relay: RelayResult) -> None:
        ticks[0], relays[0] = ticks[0] + tick, relays[0] + relay

    def banner(w: Worker) -> str:
        return (
            f"crawlherd run: {redact_url(settings.database_url)}, broker {redact_url(target)}, "
            f"frontier {redact_url(w.options.frontier_url)}"
        )

    async def main() -> None:
        async with config_db(settings, migrate=False, pool_size=worker_pool_size(settings)) as engine:
            await upgrade(engine)
            async with broker_for_service(target) as (broker, broker_down):
                rates = Rates()
                start_metrics(metrics_port)
                with worker_started(engine, broker, broker_down, settings, out, banner) as (w, stop):
                    async with (
                        w,
                        console_or_none(engine, console_port, enabled=not no_console) as console,
                        periodic_status(out, lambda: worker_status(w, rates), settings.status_interval),
                    ):
                        if console is not None:
                            out.info(f"console: {console.url}")
                        service_up()
                        await run_embedded(
                            engine, broker, w, stop=stop, interval=settings.dispatch_interval,
                            until_idle=until_idle, on_cycle=count,
                        )
                stats = {
                    "jobs/dispatched": ticks[0].inserted, "jobs/published": relays[0].published,
                    **worker_statistics(w, rates.elapsed),
                }
                out.info(stats_dump("crawlherd run stopped; statistics", stats, tty=out.tty))
                out.result("", stats)

    with contextlib.suppress(asyncio.CancelledError):
        run_async(main(), settings.event_loop)
