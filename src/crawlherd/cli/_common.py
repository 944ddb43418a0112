"""Options and helpers shared by the commands that open the config DB."""

from __future__ import annotations

from typing import Any

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import create_engine, current_revision, head_revision, upgrade
from crawlherd.errors import CrawlherdError
from crawlherd.settings import Settings, load_settings

__all__ = ["database_option", "ensure_migrated", "settings_from"]

database_option = click.option(
    "--database-url",
    default=None,
    metavar="URL",
    help="Config DB (sqlite:///file.db or postgresql://...); default: CRAWLHERD_DATABASE_URL.",
)


def settings_from(ctx: click.Context, **overrides: Any) -> Settings:
    """The settings: defaults < crawlherd.toml < environment < these flags."""
    obj = ctx.find_root().obj or {}
    return load_settings(obj.get("config_file"), **overrides)


async def ensure_migrated(engine: AsyncEngine) -> None:
    """Create the tables of a fresh (empty) config DB; refuse to work on one at an older migration
    (upgrading an existing database is the operator's decision: `crawlherd db upgrade`)."""
    current, head = await current_revision(engine), head_revision()
    if current is None and not await _has_tables(engine):
        click.echo("new config DB: creating its tables", err=True)
        await upgrade(engine)
        return
    if current != head:
        raise CrawlherdError(
            f"the config DB is at migration {current or '(none)'}, this crawlherd needs {head}: "
            "run `crawlherd db upgrade` first"
        )


async def _has_tables(engine: AsyncEngine) -> bool:
    from sqlalchemy import inspect

    async with engine.connect() as conn:
        names = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
    return any(not name.startswith("broker_") for name in names)


def engine_for(settings: Settings, *, read_only: bool = False, **options: Any) -> AsyncEngine:
    """An engine for ``settings.database_url``. ``read_only`` commands refuse a SQLite path that does
    not exist (a typo must not create an empty database)."""
    return create_engine(settings.database_url, must_exist=read_only, **options)
