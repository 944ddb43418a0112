"""``crawlherd db``: the config DB's migrations and the pruning of its history."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from crawlherd._redact import redact_url
from crawlherd.cli._common import Output, database_option, output_options, settings_from
from crawlherd.cli._console import on_db
from crawlherd.db import current_revision, head_revision, upgrade
from crawlherd.dispatch.retention import prune_history
from crawlherd.duration import parse_duration
from crawlherd.errors import ScheduleError

__all__ = ["db"]


@click.group()
def db() -> None:
    """The config DB (SQLite file or PostgreSQL): create and migrate its tables, prune its history."""


def _revision(ctx: click.Context, database_url: str | None, revision: str | None) -> dict[str, Any]:
    url = redact_url(settings_from(ctx, database_url=database_url).database_url)
    return {"database_url": url, "current": revision, "newest": head_revision(),
            "up_to_date": revision == head_revision()}


@db.command("upgrade")
@database_option
@output_options
@click.pass_context
def upgrade_cmd(ctx: click.Context, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Create the tables, or bring them to the newest migration (safe to run again)."""
    state = _revision(ctx, database_url, on_db(ctx, database_url, upgrade, action=None, migrate=False))
    Output(quiet=quiet, as_json=as_json).result(
        f"config DB {state['database_url']} is at migration {state['current']} (newest)", state
    )


@db.command("current")
@database_option
@output_options
@click.pass_context
def current_cmd(ctx: click.Context, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Show the config DB's migration and the newest one this crawlherd ships."""
    revision = on_db(ctx, database_url, current_revision, action=None, read_only=True, migrate=False)
    state = _revision(ctx, database_url, revision)
    Output(quiet=quiet, as_json=as_json).result(
        f"current: {state['current'] or '(not migrated)'}; newest: {state['newest']}", state
    )


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
@output_options
@click.pass_context
def prune_cmd(
    ctx: click.Context, database_url: str | None, runs_older_than: str | None, items_unseen_for: str | None,
    dry_run: bool, quiet: bool, as_json: bool,
) -> None:
    """Delete old history: finished job runs and items not seen for a while (run it from cron).

    Queued and running job runs are never deleted; runs younger than one day cannot be."""
    settings = settings_from(ctx, database_url=database_url)
    runs = _retention(settings.runs_retention if runs_older_than is None else runs_older_than, "--runs-older-than")
    items = _retention(
        settings.items_retention if items_unseen_for is None else items_unseen_for, "--items-unseen-for"
    )

    counts = on_db(
        ctx, database_url,
        lambda engine: prune_history(engine, runs_older_than=runs, items_unseen_for=items, dry_run=dry_run),
        action=None, read_only=True,
    )
    verb = "would delete" if dry_run else "deleted"
    kept_runs = "" if runs is not None else " (job runs kept: no retention)"
    kept_items = "" if items is not None else " (items kept: no retention)"
    Output(quiet=quiet, as_json=as_json).result(
        f"{verb} {counts.runs} job run(s){kept_runs} and {counts.items} item(s){kept_items}",
        {"dry_run": dry_run, "runs": counts.runs, "items": counts.items,
         "runs_older_than_seconds": runs.total_seconds() if runs else None,
         "items_unseen_for_seconds": items.total_seconds() if items else None},
    )
