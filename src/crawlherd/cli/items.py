"""``crawlherd items``: the scraped items."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TextIO

import click

from crawlherd.cli._common import config_db, database_option, settings_from
from crawlherd.cli._console import check_actor
from crawlherd.console.users import Action
from crawlherd.sinks.export import FORMATS, export_items

__all__ = ["items"]


@click.group()
def items() -> None:
    """Export the scraped items."""


@items.command()
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="File to write (default: standard output).",
)
@click.option("--website", default=None, help="Only this website's items.")
@database_option
@click.option("-q", "--quiet", is_flag=True, help="No summary line.")
@click.option("--json", "as_json", is_flag=True,
              help="The summary as JSON on stderr ({\"exported\": N, ...}); the items stay on --output.")
@click.pass_context
def export(ctx: click.Context, fmt: str, output: str, website: str | None, database_url: str | None, quiet: bool,
           as_json: bool) -> None:
    """Write every item as JSON Lines or CSV (one row per item, fields as columns)."""
    settings = settings_from(ctx, database_url=database_url)

    async def main(out: TextIO) -> int:
        async with config_db(settings, read_only=True) as engine:
            await check_actor(ctx, engine, Action.READ)
            return await export_items(engine, out, fmt=fmt, website=website)

    if output == "-":
        n = asyncio.run(main(sys.stdout))
    else:
        with open(output, "w", encoding="utf-8", newline="") as out:
            n = asyncio.run(main(out))
    if as_json:
        click.echo(json.dumps({"exported": n, "format": fmt, "output": output, "website": website}), err=True)
    elif not quiet:
        click.echo(f"{n} item(s) exported", err=True)
