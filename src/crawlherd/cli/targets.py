"""``crawlherd targets``: import, list, show, enable/disable and preview scrape targets."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar
from zoneinfo import ZoneInfo

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.cli._common import database_option, engine_for, ensure_migrated, settings_from
from crawlherd.cli._console import echo_json, json_option
from crawlherd.service.targets import (
    TargetInfo,
    get_target,
    import_targets,
    list_targets,
    preview_target,
    set_active,
)
from crawlherd.service.targets_file import load_targets_file

__all__ = ["targets"]

T = TypeVar("T")


def _run(ctx: click.Context, database_url: str | None, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    settings = settings_from(ctx, database_url=database_url)

    async def main() -> T:
        engine = engine_for(settings)
        try:
            await ensure_migrated(engine)
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z" if value else "-"


@click.group()
def targets() -> None:
    """Scrape targets: website x keywords x location, each with its schedule."""


@targets.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@database_option
@click.option("--check", is_flag=True, help="Only validate the file; write nothing.")
@click.pass_context
def import_cmd(ctx: click.Context, file: str, database_url: str | None, check: bool) -> None:
    """Import a TOML or YAML targets file (all or nothing; every problem is listed)."""
    if check:
        spec = load_targets_file(file)
        combos = sum(len(t.keywords) * len(t.locations) for t in spec.targets)
        click.echo(f"{file}: OK ({len(spec.websites)} website(s), {combos} target(s))")
        return
    result = _run(ctx, database_url, lambda engine: import_targets(engine, file))
    click.echo(
        f"{file}: websites {result.websites_created} new, {result.websites_updated} updated; "
        f"targets {result.targets_created} new, {result.targets_updated} updated, "
        f"{result.targets_unchanged} unchanged"
    )


@targets.command("list")
@database_option
@click.option("--website", default=None, help="Only this website's targets.")
@json_option
@click.pass_context
def list_cmd(ctx: click.Context, database_url: str | None, website: str | None, as_json: bool) -> None:
    """One line per target: id, state, website, keywords, location, schedule, next run (UTC)."""
    rows = _run(ctx, database_url, lambda engine: list_targets(engine, website=website))
    if as_json:
        echo_json([dataclasses.asdict(t) for t in rows])
        return
    if not rows:
        click.echo("no targets (import some with `crawlherd targets import FILE`)")
        return
    click.echo(f"{'ID':>6}  {'STATE':8}  {'WEBSITE':20}  {'KEYWORDS':24}  {'LOCATION':16}  {'SCHEDULE':22}  NEXT RUN")
    for t in rows:
        click.echo(
            f"{t.id:>6}  {'active' if t.active else 'disabled':8}  {t.website[:20]:20}  {t.keywords[:24]:24}  "
            f"{(t.location or '-')[:16]:16}  {t.schedule[:22]:22}  {_ts(t.next_run_at)}"
        )


def _show(t: TargetInfo) -> None:
    click.echo(f"target {t.id}: {t.keywords!r} x {t.location or '(no location)'!r} on {t.website}")
    for label, value in (
        ("state", "active" if t.active else "disabled"),
        ("schedule", f"{t.schedule} ({t.timezone})"),
        ("jitter", f"{t.jitter_ms / 1000:g}s"),
        ("misfire", t.misfire),
        ("last scheduled", _ts(t.last_scheduled)),
        ("next run", _ts(t.next_run_at)),
        *(
            (k.replace("_", " "), _ts(v) if isinstance(v, datetime) or v is None else str(v))
            for k, v in t.details.items()
        ),
    ):
        click.echo(f"  {label:16} {value}")


@targets.command("show")
@click.argument("target_id", type=int)
@database_option
@click.pass_context
def show_cmd(ctx: click.Context, target_id: int, database_url: str | None) -> None:
    """Everything about one target."""
    _show(_run(ctx, database_url, lambda engine: get_target(engine, target_id)))


@targets.command("enable")
@click.argument("target_id", type=int)
@database_option
@click.pass_context
def enable_cmd(ctx: click.Context, target_id: int, database_url: str | None) -> None:
    """Enable a target; it starts from its next future slot."""
    t = _run(ctx, database_url, lambda engine: set_active(engine, target_id, True))
    click.echo(f"target {t.id} enabled; next run {_ts(t.next_run_at)}")


@targets.command("disable")
@click.argument("target_id", type=int)
@database_option
@click.pass_context
def disable_cmd(ctx: click.Context, target_id: int, database_url: str | None) -> None:
    """Disable a target: no more jobs until it is enabled."""
    t = _run(ctx, database_url, lambda engine: set_active(engine, target_id, False))
    click.echo(f"target {t.id} disabled")


@targets.command("preview")
@click.argument("target_id", type=int)
@click.option("--next", "count", type=click.IntRange(1, 1000), default=10, show_default=True, help="How many runs.")
@database_option
@click.pass_context
def preview_cmd(ctx: click.Context, target_id: int, count: int, database_url: str | None) -> None:
    """The next run times of a target (slot, and run time with jitter, in UTC and its time zone)."""

    async def work(engine: AsyncEngine) -> tuple[TargetInfo, list[tuple[datetime, datetime]]]:
        return await get_target(engine, target_id), await preview_target(engine, target_id, count)

    info, runs = _run(ctx, database_url, work)
    tz = ZoneInfo(info.timezone)
    click.echo(f"target {info.id}: {info.schedule} ({info.timezone}), jitter {info.jitter_ms / 1000:g}s")
    for slot, run_at in runs:
        local = run_at.astimezone(tz)
        click.echo(f"  slot {_ts(slot)}  runs {_ts(run_at)}  ({local.isoformat(timespec='seconds')} {local.tzname()})")


# -- the console's answers (issue 12): run now ------------------------------------------------------


@targets.command("run")
@click.argument("target_ids", nargs=-1, type=int, required=True)
@database_option
@click.pass_context
def run_cmd(ctx: click.Context, target_ids: tuple[int, ...], database_url: str | None) -> None:
    """Run targets now: one ad-hoc slot each, through the outbox (a running dispatcher publishes it).
    A target whose earlier run-now has not finished is not queued twice."""
    from crawlherd.service.run_now import ManualRunResult, run_now

    async def work(engine: AsyncEngine) -> list[ManualRunResult]:
        return [await run_now(engine, tid, requested_by="cli") for tid in target_ids]

    for r in _run(ctx, database_url, work):
        state = "queued" if r.created else "already queued"
        click.echo(f"target {r.target_id}: run {state} (slot {_ts(r.slot_at)})")
