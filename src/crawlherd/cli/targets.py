"""``crawlherd targets``: import, list, show, enable/disable and preview scrape targets."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.cli._common import Output, database_option, output_options
from crawlherd.cli._console import acting_as, on_db
from crawlherd.console.users import Action
from crawlherd.dispatch.targets import (
    TargetInfo,
    delete_targets,
    get_target,
    import_targets,
    list_targets,
    preview_target,
    set_active,
)
from crawlherd.dispatch.targets_file import load_targets_file

__all__ = ["targets"]


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z" if value else "-"


@click.group()
def targets() -> None:
    """Scrape targets: website x keywords x location, each with its schedule."""


@targets.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@database_option
@click.option("--check", is_flag=True, help="Only validate the file; write nothing.")
@click.option("--prune", is_flag=True, help="Also delete the targets that are not in the file (and their job history).")
@click.option("--dry-run", is_flag=True, help="Say what the import (and --prune) would do; change nothing.")
@output_options
@click.pass_context
def import_cmd(ctx: click.Context, file: str, database_url: str | None, check: bool, prune: bool,
               dry_run: bool, quiet: bool, as_json: bool) -> None:
    """Import a TOML or YAML targets file (all or nothing; every problem is listed).

    \b
    Websites are updated by name, targets by website x keywords x location. Targets that are no longer
    in the file stay unless --prune; see them first with --prune --dry-run.
    """
    out = Output(quiet=quiet, as_json=as_json)
    if check:
        spec = load_targets_file(file)
        combos = sum(len(t.keywords) * len(t.locations) for t in spec.targets)
        out.result(f"{file}: OK ({len(spec.websites)} website(s), {combos} target(s))",
                   {"file": file, "ok": True, "websites": len(spec.websites), "targets": combos})
        return
    result = on_db(ctx, database_url, lambda engine: import_targets(engine, file, prune=prune, dry_run=dry_run),
                   action=Action.READ if dry_run else Action.IMPORT)
    verb = "would delete" if dry_run else "deleted"
    lines = [f"{verb} target {_name(t)}" for t in result.pruned]
    lines.append(
        ("dry run, nothing changed: " if dry_run else "")
        + f"{file}: websites {result.websites_created} new, {result.websites_updated} updated; "
        f"targets {result.targets_created} new, {result.targets_updated} updated, "
        f"{result.targets_unchanged} unchanged" + (f", {len(result.pruned)} {verb}" if prune else "")
    )
    data = dataclasses.asdict(result) | {"file": file, "dry_run": dry_run}
    out.result("\n".join(lines), data)


def _name(t: TargetInfo) -> str:
    return f"{t.id}: {t.keywords!r} x {t.location or '(no location)'!r} on {t.website}"


def _info(t: TargetInfo) -> dict[str, Any]:
    return dataclasses.asdict(t)


@targets.command("delete")
@click.argument("target_ids", nargs=-1, type=int, required=True, metavar="ID...")
@database_option
@output_options
@click.pass_context
def delete_cmd(ctx: click.Context, target_ids: tuple[int, ...], database_url: str | None, quiet: bool,
               as_json: bool) -> None:
    """Delete targets by id (all or none), with their pending jobs and run history; their items stay.
    A target still in your targets file comes back at the next import."""
    deleted = on_db(ctx, database_url, lambda engine: delete_targets(engine, target_ids), action=Action.EDIT)
    Output(quiet=quiet, as_json=as_json).result(
        "\n".join(f"deleted target {_name(t)}" for t in deleted), [_info(t) for t in deleted]
    )


@targets.command("list")
@database_option
@click.option("--website", default=None, help="Only this website's targets.")
@output_options
@click.pass_context
def list_cmd(ctx: click.Context, database_url: str | None, website: str | None, quiet: bool, as_json: bool) -> None:
    """One line per target: id, state, website, keywords, location, schedule, next run (UTC)."""
    rows = on_db(ctx, database_url, lambda engine: list_targets(engine, website=website), action=Action.READ,
                 read_only=True)
    lines = [f"{'ID':>6}  {'STATE':8}  {'WEBSITE':20}  {'KEYWORDS':24}  {'LOCATION':16}  {'SCHEDULE':22}  NEXT RUN"]
    lines += [
        f"{t.id:>6}  {'active' if t.active else 'disabled':8}  {t.website[:20]:20}  {t.keywords[:24]:24}  "
        f"{(t.location or '-')[:16]:16}  {t.schedule[:22]:22}  {_ts(t.next_run_at)}"
        for t in rows
    ]
    text = "\n".join(lines) if rows else "no targets (import some with `crawlherd targets import FILE`)"
    Output(quiet=quiet, as_json=as_json).result(text, [_info(t) for t in rows])


def _show(t: TargetInfo) -> str:
    lines = [f"target {_name(t)}"]
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
        lines.append(f"  {label:16} {value}")
    return "\n".join(lines)


@targets.command("show")
@click.argument("target_id", type=int)
@database_option
@output_options
@click.pass_context
def show_cmd(ctx: click.Context, target_id: int, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Everything about one target."""
    t = on_db(ctx, database_url, lambda engine: get_target(engine, target_id), action=Action.READ, read_only=True)
    Output(quiet=quiet, as_json=as_json).result(_show(t), _info(t))


def _switch(active: bool, name: str, doc: str) -> None:
    """``targets enable`` and ``targets disable``."""

    @targets.command(name, help=doc)
    @click.argument("target_id", type=int)
    @database_option
    @output_options
    @click.pass_context
    def switch(ctx: click.Context, target_id: int, database_url: str | None, quiet: bool, as_json: bool) -> None:
        t = on_db(ctx, database_url, lambda engine: set_active(engine, target_id, active), action=Action.PAUSE)
        text = f"target {t.id} enabled; next run {_ts(t.next_run_at)}" if active else f"target {t.id} disabled"
        Output(quiet=quiet, as_json=as_json).result(text, _info(t))


_switch(True, "enable", "Enable a target; it starts from its next future slot.")
_switch(False, "disable", "Disable a target: no more jobs until it is enabled.")


@targets.command("preview")
@click.argument("target_id", type=int)
@click.option("--next", "count", type=click.IntRange(1, 1000), default=10, show_default=True, help="How many runs.")
@database_option
@output_options
@click.pass_context
def preview_cmd(ctx: click.Context, target_id: int, count: int, database_url: str | None, quiet: bool,
                as_json: bool) -> None:
    """The next run times of a target (slot, and run time with jitter, in UTC and its time zone)."""

    async def work(engine: AsyncEngine) -> tuple[TargetInfo, list[tuple[datetime, datetime]]]:
        return await get_target(engine, target_id), await preview_target(engine, target_id, count)

    info, runs = on_db(ctx, database_url, work, action=Action.READ, read_only=True)
    tz = ZoneInfo(info.timezone)
    lines = [f"target {info.id}: {info.schedule} ({info.timezone}), jitter {info.jitter_ms / 1000:g}s"]
    for slot, run_at in runs:
        local = run_at.astimezone(tz)
        lines.append(
            f"  slot {_ts(slot)}  runs {_ts(run_at)}  ({local.isoformat(timespec='seconds')} {local.tzname()})"
        )
    data = {"target": info.id, "schedule": info.schedule, "timezone": info.timezone, "jitter_ms": info.jitter_ms,
            "runs": [{"slot": slot, "run_at": run_at, "local": run_at.astimezone(tz)} for slot, run_at in runs]}
    Output(quiet=quiet, as_json=as_json).result("\n".join(lines), data)


# -- the console's answers (issue 12): run now ------------------------------------------------------


@targets.command("run")
@click.argument("target_ids", nargs=-1, type=int, required=True)
@database_option
@output_options
@click.pass_context
def run_cmd(ctx: click.Context, target_ids: tuple[int, ...], database_url: str | None, quiet: bool,
            as_json: bool) -> None:
    """Run targets now: one ad-hoc slot each, through the outbox (a running dispatcher publishes it).
    A target whose earlier run-now has not finished is not queued twice."""
    from crawlherd.console.run_now import ManualRunResult, run_now

    async def work(engine: AsyncEngine) -> list[ManualRunResult]:
        return [await run_now(engine, tid, requested_by=who) for tid in target_ids]

    who = acting_as(ctx)
    results = on_db(ctx, database_url, work, action=Action.RUN_NOW)
    Output(quiet=quiet, as_json=as_json).result(
        "\n".join(
            f"target {r.target_id}: run {'queued' if r.created else 'already queued'} (slot {_ts(r.slot_at)})"
            for r in results
        ),
        [dataclasses.asdict(r) for r in results],
    )
