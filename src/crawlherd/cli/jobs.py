"""``crawlherd jobs``: dead jobs, and sending them again."""

from __future__ import annotations

import asyncio

import click
from rich.console import Console
from rich.table import Table

from crawlherd.brokers import open_broker
from crawlherd.cli._common import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.errors import CrawlherdError
from crawlherd.worker.runs import RunStore

__all__ = ["jobs"]


@click.group()
def jobs() -> None:
    """Inspect job runs: the dead ones, and retry them."""


@jobs.command()
@database_option
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.pass_context
def dead(ctx: click.Context, database_url: str | None, limit: int) -> None:
    """List dead jobs (failed --max-attempts times), oldest first, with their last error."""
    settings = settings_from(ctx, database_url=database_url)

    async def main() -> None:
        engine = engine_for(settings, read_only=True)
        try:
            await ensure_migrated(engine)
            runs = await RunStore(engine).dead(limit)
        finally:
            await engine.dispose()
        if not runs:
            click.echo("no dead jobs")
            return
        table = Table("run", "target", "slot", "attempts", "died", "error")
        for r in runs:
            table.add_row(
                str(r.id),
                str(r.target_id),
                r.slot_at.isoformat(),
                str(r.attempts),
                r.finished_at.isoformat(timespec="seconds") if r.finished_at else "",
                r.error or "",
            )
        Console().print(table)

    asyncio.run(main())


@jobs.command()
@click.argument("run_ids", nargs=-1, type=int)
@click.option("--all", "retry_all", is_flag=True, help="Every dead job.")
@database_option
@click.option("--broker-url", default=None, metavar="URL", help="Message broker; default: CRAWLHERD_BROKER_URL.")
@click.pass_context
def retry(
    ctx: click.Context, run_ids: tuple[int, ...], retry_all: bool, database_url: str | None, broker_url: str | None
) -> None:
    """Send dead jobs again (RUN_IDS from `crawlherd jobs dead`, or --all), from their first attempt."""
    if not run_ids and not retry_all:
        raise click.UsageError("give RUN_IDS (see `crawlherd jobs dead`) or --all")
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url)

    async def main() -> None:
        engine = engine_for(settings)
        try:
            await ensure_migrated(engine)
            store = RunStore(engine)
            ids = list(run_ids) or [r.id for r in await store.dead(limit=1_000_000)]
            sent = 0
            async with open_broker(settings.effective_broker_url) as broker:
                for run_id in ids:
                    job = await store.requeue(run_id)
                    if job is None:
                        click.secho(f"run {run_id}: not a dead job; skipped", fg="yellow", err=True)
                        continue
                    key, body = job
                    try:
                        await broker.publish(body, key=key)
                    except CrawlherdError:
                        await store.mark_dead_again(run_id)
                        raise
                    sent += 1
            click.echo(f"sent {sent} job(s) again")
        finally:
            await engine.dispose()

    asyncio.run(main())
