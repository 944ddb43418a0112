"""``crawlherd explain TARGET [--at TIME]``: why did (or didn't) a target run, and its lineage."""

from __future__ import annotations

from datetime import UTC, datetime

import click
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.cli._common import Output, database_option, output_options
from crawlherd.cli._console import on_db
from crawlherd.console.explain import Explanation, Lineage, explain, lineage
from crawlherd.console.users import Action

__all__ = ["explain_cmd"]


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


@click.command("explain")
@click.argument("target_id", type=int)
@click.option("--at", "at", default=None, metavar="TIME",
              help="The time asked about (ISO 8601; UTC unless an offset is given). Default: now.")
@click.option("--slots", type=click.IntRange(0, 1000), default=5, show_default=True,
              help="Lineage: how many recent slots.")
@database_option
@output_options
@click.pass_context
def explain_cmd(
    ctx: click.Context, target_id: int, at: str | None, slots: int, database_url: str | None, quiet: bool,
    as_json: bool,
) -> None:
    """Why did target TARGET_ID (not) run at TIME? One verdict, then its recent slots, hand by hand:
    claimed by, published to, worker, attempts, outcome."""
    when = None
    if at:
        try:
            when = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(f"not a time: {at!r} (use 2026-01-31T07:00 or 2026-01-31T07:00+01:00)") from None
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when

    async def work(engine: AsyncEngine) -> tuple[Explanation, Lineage]:
        return await explain(engine, target_id, when), await lineage(engine, target_id, limit=max(slots, 1))

    why, trail = on_db(ctx, database_url, work, action=Action.READ, read_only=True)
    lines = [f"target {target_id} at {_ts(why.at)} UTC: {why.verdict}", f"  {why.summary}"]
    if slots and trail.slots:
        lines.append("recent slots:")
        for s in trail.slots[:slots]:
            outcome = s.run_status or ("published" if s.published_at else "pending")
            lines.append(
                f"  {_ts(s.slot_at)}{' (run now)' if s.manual_by else ''}: claimed {_ts(s.claimed_at)} by "
                f"{s.claimed_by or '?'}; published {_ts(s.published_at)}{' to ' + s.broker if s.broker else ''}; "
                f"worker {s.worker or '-'}; {outcome}, {s.run_attempts} attempt(s)"
                + (f"; error: {s.error}" if s.error else "")
            )
    Output(quiet=quiet, as_json=as_json).result(
        "\n".join(lines), {**why.as_dict(), "lineage": [s.as_dict() for s in trail.slots[:slots]]}
    )
