"""``crawlherd worker``: consume job messages and crawl them."""

from __future__ import annotations

import asyncio
import contextlib

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.brokers import Broker, open_broker
from crawlherd.cli._service import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.cli._signals import stop_on_signals
from crawlherd.fetch.base import FetchLimits
from crawlherd.worker.worker import Worker

__all__ = ["make_worker", "worker", "worker_options"]


def worker_options(func: click.decorators.FC) -> click.decorators.FC:
    """The options every command that runs a worker takes."""
    for option in reversed(
        [
            click.option(
                "--concurrency",
                type=click.IntRange(1, 1000),
                default=4,
                show_default=True,
                help="Jobs in flight at once (also the broker prefetch).",
            ),
            click.option(
                "--dispatcher",
                "dispatcher_kind",
                type=click.Choice(["semaphore", "memory-adaptive"]),
                default="semaphore",
                show_default=True,
                help="How detail pages of a job are dispatched.",
            ),
            click.option(
                "--max-attempts",
                type=click.IntRange(1, 100),
                default=3,
                show_default=True,
                help="Attempts before a job is dead.",
            ),
            click.option(
                "--backoff",
                type=click.FloatRange(min=0),
                default=5.0,
                show_default=True,
                help="First retry delay in seconds (doubles per attempt).",
            ),
            click.option(
                "--allow-private", is_flag=True, help="Let fetchers reach private and loopback addresses (local sites)."
            ),
        ]
    ):
        func = option(func)
    return func


def make_worker(
    engine: AsyncEngine,
    broker: Broker,
    *,
    allow_private: bool,
    concurrency: int,
    dispatcher_kind: str,
    max_attempts: int,
    backoff: float,
    user_agent: str,
) -> Worker:
    """A worker from the command-line options."""
    limits = FetchLimits(allow_private_addresses=allow_private, user_agent=user_agent)
    return Worker(
        engine,
        broker,
        concurrency=concurrency,
        dispatcher=dispatcher_kind,
        max_attempts=max_attempts,
        backoff=backoff,
        max_backoff=max(backoff, 600.0),
        limits=limits,
    )


@click.command()
@database_option
@click.option("--broker-url", default=None, metavar="URL", help="Message broker; default: CRAWLHERD_BROKER_URL.")
@worker_options
@click.pass_context
def worker(
    ctx: click.Context,
    database_url: str | None,
    broker_url: str | None,
    concurrency: int,
    dispatcher_kind: str,
    max_attempts: int,
    backoff: float,
    allow_private: bool,
) -> None:
    """Consume scrape jobs and crawl them; items go to the config DB's items table.

    A job whose run already succeeded is skipped; a failed job is retried with a growing delay and is
    dead after --max-attempts (see `crawlherd jobs dead`). Run as many workers as you like, on as many
    machines. SIGTERM or Ctrl+C: stop taking jobs, let jobs in flight finish (30 s), requeue the rest.
    """
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url)
    broker_url = settings.effective_broker_url

    async def main() -> None:
        engine = engine_for(settings)
        try:
            await ensure_migrated(engine)
            async with open_broker(broker_url) as broker:
                w = make_worker(
                    engine,
                    broker,
                    allow_private=allow_private or settings.allow_private_addresses,
                    concurrency=concurrency,
                    dispatcher_kind=dispatcher_kind,
                    max_attempts=max_attempts,
                    backoff=backoff,
                    user_agent=settings.user_agent,
                )
                click.echo(
                    f"worker {w.name}: {redact_url(broker_url)} -> {redact_url(settings.database_url)}, "
                    f"{concurrency} job(s) at once"
                )
                stop = asyncio.Event()
                async with w:
                    with stop_on_signals(stop):
                        stats = await w.run(stop)
                click.echo(
                    f"worker stopped: {stats.succeeded} done, {stats.retried} retried, {stats.dead} dead, "
                    f"{stats.skipped} skipped, {stats.requeued} requeued; {stats.items_new} new items"
                )
        finally:
            await engine.dispose()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())
