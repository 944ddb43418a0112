"""``crawlherd db``: the config DB's migrations and the pruning of its history."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import click

from crawlherd._redact import redact_url
from crawlherd.cli._common import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.db import current_revision, head_revision, upgrade
from crawlherd.duration import parse_duration
from crawlherd.errors import ScheduleError
from crawlherd.service.retention import PruneCounts, prune_history

__all__ = ["db"]


@click.group()
def db() -> None:
    """The config DB (SQLite file or PostgreSQL): create and migrate its tables, prune its history."""


@db.command("upgrade")
@database_option
@click.pass_context
def upgrade_cmd(ctx: click.Context, database_url: str | None) -> None:
    """Create the tables, or bring them to the newest migration (safe to run again)."""
    settings = settings_from(ctx, database_url=database_url)

    async def main() -> str:
        engine = engine_for(settings)
        try:
            return await upgrade(engine)
        finally:
            await engine.dispose()

    revision = asyncio.run(main())
    click.echo(f"config DB {redact_url(settings.database_url)} is at migration {revision} (newest)")


@db.command("current")
@database_option
@click.pass_context
def current_cmd(ctx: click.Context, database_url: str | None) -> None:
    """Show the config DB's migration and the newest one this crawlherd ships."""
    settings = settings_from(ctx, database_url=database_url)

    async def main() -> str | None:
        engine = engine_for(settings)
        try:
            return await current_revision(engine)
        finally:
            await engine.dispose()

    current = asyncio.run(main())
    click.echo(f"current: {current or '(not migrated)'}; newest: {head_revision()}")


def _retention(value: str, what: str) -> timedelta | None:
    if value.strip().lower() in ("", "never", "forever"):
        return None
    try:
        return parse_duration(value)
    except ScheduleError as exc:
        raise click.BadParameter(f"{value!r}: {exc}", param_hint=what) from None


@db.command("prune")
@database_option
@click.option(
    "--runs-older-than",
    default=None,
    metavar="DURATION",
    help="Delete job runs finished longer ago than this (e.g. 90d; 'never' keeps them); "
    "default: the runs_retention setting (90d).",
)
@click.option(
    "--items-unseen-for",
    default=None,
    metavar="DURATION",
    help="Delete items last seen longer ago than this (e.g. 180d; 'never' keeps them); "
    "default: the items_retention setting (never).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted, delete nothing.")
@click.pass_context
def prune_cmd(
    ctx: click.Context, database_url: str | None, runs_older_than: str | None, items_unseen_for: str | None,
    dry_run: bool,
) -> None:
    """Delete old history: finished job runs and items not seen for a while (run it from cron).

    Queued and running job runs are never deleted; runs younger than one day cannot be."""
    settings = settings_from(ctx, database_url=database_url)
    runs = _retention(settings.runs_retention if runs_older_than is None else runs_older_than, "--runs-older-than")
    items = _retention(
        settings.items_retention if items_unseen_for is None else items_unseen_for, "--items-unseen-for"
    )

    async def main() -> PruneCounts:
        engine = engine_for(settings, read_only=True)
        try:
            await ensure_migrated(engine)
            return await prune_history(engine, runs_older_than=runs, items_unseen_for=items, dry_run=dry_run)
        finally:
            await engine.dispose()

    counts = asyncio.run(main())
    verb = "would delete" if dry_run else "deleted"
    kept_runs = "" if runs is not None else " (job runs kept: no retention)"
    kept_items = "" if items is not None else " (items kept: no retention)"
    click.echo(f"{verb} {counts.runs} job run(s){kept_runs} and {counts.items} item(s){kept_items}")
