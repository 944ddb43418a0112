"""``crawlherd worker``: consume job messages and crawl them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.brokers import Broker, open_broker
from crawlherd.cli._common import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.cli._console import metrics_port_option, start_metrics
from crawlherd.cli._signals import stop_on_signals
from crawlherd.fetch.base import FetchLimits
from crawlherd.settings import Settings
from crawlherd.worker.worker import PAGE_DISPATCHERS, Worker

__all__ = ["WorkerOptions", "make_worker", "worker", "worker_options"]

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option("--concurrency", type=click.IntRange(1, 1000), default=4, show_default=True,
                 help="Jobs in flight at once (also the broker prefetch)."),
    click.option("--page-dispatcher", type=click.Choice(PAGE_DISPATCHERS), default="semaphore", show_default=True,
                 help="The engine dispatcher that runs every page (listing and detail)."),
    click.option("--page-concurrency", type=click.IntRange(1, 1000), default=8, show_default=True,
                 help="Pages (listing and detail) in flight at once."),
    click.option("--max-attempts", type=click.IntRange(1, 100), default=3, show_default=True,
                 help="Attempts before a job is dead."),
    click.option("--backoff", type=click.FloatRange(min=0), default=5.0, show_default=True,
                 help="First retry delay in seconds (doubles per attempt, with jitter)."),
    click.option("--allow-private", is_flag=True,
                 help="Let the fetchers reach private and loopback addresses (local sites)."),
    click.option("--frontier-url", default=None, metavar="URL",
                 help="Frontier of the pages (default: CRAWLHERD_FRONTIER_URL, else the SQLite config DB "
                 "file, else memory://); redis://... shares it, and its politeness, between workers."),
]

WorkerOptions = dict[str, Any]


def worker_options(func: F) -> F:
    """The options of every command that runs a worker; they arrive as keyword arguments."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def make_worker(engine: AsyncEngine, broker: Broker, settings: Settings, **options: Any) -> Worker:
    """A worker from the settings and the :func:`worker_options` values."""
    limits = FetchLimits(
        allow_private_addresses=options["allow_private"] or settings.allow_private_addresses,
        user_agent=settings.user_agent,
    )
    backoff = float(options["backoff"])
    return Worker(
        engine,
        broker,
        concurrency=options["concurrency"],
        page_dispatcher=options["page_dispatcher"],
        page_concurrency=options["page_concurrency"],
        max_attempts=options["max_attempts"],
        backoff=backoff,
        max_backoff=max(backoff, 600.0),
        limits=limits,
        frontier_url=options.get("frontier_url") or settings.effective_frontier_url,
    )


@click.command()
@database_option
@click.option("--broker-url", default=None, metavar="URL", help="Message broker; default: CRAWLHERD_BROKER_URL.")
@worker_options
@metrics_port_option
@click.pass_context
def worker(
    ctx: click.Context, /, database_url: str | None, broker_url: str | None, metrics_port: int | None, **options: Any
) -> None:
    """Consume scrape jobs and crawl them; items go to the config DB's items table.

    A job whose run already succeeded is skipped; a failed job is retried with a growing delay and is
    dead after --max-attempts (see `crawlherd jobs dead`). Run as many workers as you like, on as many
    machines (share a redis:// --frontier-url so that they share politeness and seen pages).
    SIGTERM or Ctrl+C: stop taking jobs, let jobs in flight finish (30 s), requeue the rest.
    """
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url)
    target = settings.effective_broker_url

    async def main() -> None:
        engine = engine_for(settings)
        try:
            await ensure_migrated(engine)
            start_metrics(metrics_port)
            async with open_broker(target) as broker:
                w = make_worker(engine, broker, settings, **options)
                click.echo(
                    f"worker {w.name}: {redact_url(target)} -> {redact_url(settings.database_url)}, "
                    f"{w.concurrency} job(s) at once, frontier {redact_url(w.frontier_url)}"
                )
                stop = asyncio.Event()
                async with w:
                    with stop_on_signals(stop):
                        stats = await w.run(stop)
                click.echo(
                    f"worker stopped: {stats.succeeded} done, {stats.retried} retried, {stats.dead} dead, "
                    f"{stats.skipped} skipped, {stats.requeued} requeued; {stats.detail_pages} detail pages; "
                    f"{stats.items_new} new items"
                )
        finally:
            await engine.dispose()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())
