"""``crawlherd db``: the config DB's migrations."""

from __future__ import annotations

import asyncio

import click

from crawlherd._redact import redact_url
from crawlherd.cli._common import Output, database_option, engine_for, output_options, settings_from
from crawlherd.db import current_revision, head_revision, upgrade

__all__ = ["db"]


@click.group()
def db() -> None:
    """The config DB (SQLite file or PostgreSQL): create and migrate its tables."""


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
@output_options
@click.pass_context
def current_cmd(ctx: click.Context, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Show the config DB's migration and the newest one this crawlherd ships."""
    settings = settings_from(ctx, database_url=database_url)

    async def main() -> str | None:
        engine = engine_for(settings, read_only=True)
        try:
            return await current_revision(engine)
        finally:
            await engine.dispose()

    current = asyncio.run(main())
    Output(quiet=quiet, as_json=as_json).result(
        f"current: {current or '(not migrated)'}; newest: {head_revision()}",
        {"database_url": redact_url(settings.database_url), "current": current, "newest": head_revision(),
         "up_to_date": current == head_revision()},
    )
