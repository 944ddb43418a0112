"""Helpers shared by the service commands (db, targets, dispatch)."""

from __future__ import annotations

from typing import Any

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import create_engine, current_revision, head_revision
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
    """Refuse to work on a config DB that is not at the newest migration."""
    current, head = await current_revision(engine), head_revision()
    if current != head:
        raise CrawlherdError(
            f"the config DB is at migration {current or '(none)'}, this crawlherd needs {head}: "
            "run `crawlherd db upgrade` first"
        )


def engine_for(settings: Settings, **options: Any) -> AsyncEngine:
    """An engine for ``settings.database_url``."""
    return create_engine(settings.database_url, **options)
