"""``crawlherd jobs``: job runs (list, show), dead jobs, and sending them again."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime

import click
from rich.console import Console
from rich.table import Table

from crawlherd.brokers import open_broker
from crawlherd.cli._common import Output, broker_option, config_db, database_option, output_options, settings_from
from crawlherd.cli._console import acting_as, check_actor, on_db
from crawlherd.console.dead_letters import discard, list_dead_letters
from crawlherd.console.jobs import JOB_STATUSES, JobFilter, get_job, list_jobs
from crawlherd.console.users import Action
from crawlherd.errors import CrawlherdError
from crawlherd.worker.runs import RunStore

__all__ = ["jobs"]


@click.group()
def jobs() -> None:
    """Inspect job runs: list them, show one with its attempts, list the dead ones and retry them."""


@jobs.command()
@database_option
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@output_options
@click.pass_context
def dead(ctx: click.Context, database_url: str | None, limit: int, quiet: bool, as_json: bool) -> None:
    """List dead jobs (failed --max-attempts times, or that no attempt could cure), oldest first, with
    their last error: the console's dead letters (a discarded one is not listed)."""
    runs = on_db(ctx, database_url, lambda engine: list_dead_letters(engine, limit=limit), action=Action.READ,
                 read_only=True)
    text = "no dead jobs"
    if runs:
        table = Table("run", "target", "slot", "attempts", "died", "error")
        for r in runs:
            table.add_row(
                str(r.run_id),
                str(r.target_id),
                r.slot_at.isoformat(),
                str(r.attempts),
                r.died_at.isoformat(timespec="seconds") if r.died_at else "",
                r.reason or "",
            )
        buffer = io.StringIO()
        Console(file=buffer, width=Console().width).print(table)
        text = buffer.getvalue().rstrip("\n")
    data = [{"id": r.run_id, "target_id": r.target_id, "website": r.website, "slot_at": r.slot_at,
             "attempts": r.attempts, "error": r.reason, "finished_at": r.died_at} for r in runs]
    Output(quiet=quiet, as_json=as_json).result(text, data)


@jobs.command()
@click.argument("run_ids", nargs=-1, type=int)
@click.option("--all", "retry_all", is_flag=True, help="Every dead job.")
@database_option
@broker_option
@output_options
@click.pass_context
def retry(
    ctx: click.Context, run_ids: tuple[int, ...], retry_all: bool, database_url: str | None, broker_url: str | None,
    quiet: bool, as_json: bool,
) -> None:
    """Send dead jobs again (RUN_IDS from `crawlherd jobs dead`, or --all), from their first attempt."""
    if not run_ids and not retry_all:
        raise click.UsageError("give RUN_IDS (see `crawlherd jobs dead`) or --all")
    settings = settings_from(ctx, database_url=database_url, broker_url=broker_url)
    out = Output(quiet=quiet, as_json=as_json)

    async def main() -> tuple[list[int], list[int]]:
        async with config_db(settings) as engine:
            await check_actor(ctx, engine, Action.RETRY)
            store = RunStore(engine)
            ids = list(run_ids) or [r.run_id for r in await list_dead_letters(engine, limit=1_000_000)]
            sent: list[int] = []
            skipped: list[int] = []
            async with open_broker(settings.effective_broker_url) as broker:
                for run_id in ids:
                    job = await store.requeue(run_id)
                    if job is None:
                        if not quiet:
                            click.secho(f"run {run_id}: not a dead job; skipped", fg="yellow", err=True)
                        skipped.append(run_id)
                        continue
                    key, body = job
                    try:
                        await broker.publish(body, key=key)
                    except CrawlherdError:
                        await store.mark_dead_again(run_id)
                        raise
                    sent.append(run_id)
            return sent, skipped

    sent, skipped = asyncio.run(main())
    out.result(f"sent {len(sent)} job(s) again", {"sent": sent, "skipped": skipped})


@jobs.command("discard")
@click.argument("run_id", type=int)
@click.option("--reason", required=True, help="Why (kept with the run, and in the audit trail).")
@database_option
@output_options
@click.pass_context
def discard_cmd(ctx: click.Context, run_id: int, reason: str, database_url: str | None, quiet: bool,
                as_json: bool) -> None:
    """Discard dead job RUN_ID (it leaves the dead letters; the run and its attempts stay)."""
    on_db(ctx, database_url, lambda engine: discard(engine, run_id, reason=reason, actor=acting_as(ctx)),
          action=Action.DISCARD)
    Output(quiet=quiet, as_json=as_json).result(f"run {run_id} discarded", {"run": run_id, "discarded": True})


# -- the console's answers (issue 12): jobs list / show ---------------------------------------------


@jobs.command("list")
@click.option("--status", type=click.Choice(JOB_STATUSES), default=None, help="Only jobs in this status.")
@click.option("--target", "target_id", type=int, default=None, help="Only this target's jobs.")
@click.option("--website", default=None, help="Only this website's jobs.")
@click.option("--since", default=None, metavar="TIME", help="Changed at or after TIME (ISO 8601, UTC by default).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@database_option
@output_options
@click.pass_context
def list_cmd(
    ctx: click.Context, status: str | None, target_id: int | None, website: str | None, since: str | None,
    limit: int, database_url: str | None, quiet: bool, as_json: bool,
) -> None:
    """Jobs, newest first: running, succeeded, retrying, dead, queued."""
    flt = JobFilter(status=status, target_id=target_id, website=website, since=_when(since), limit=limit)
    rows = on_db(ctx, database_url, lambda engine: list_jobs(engine, flt), action=Action.READ, read_only=True)
    lines = [
        f"{'RUN':>7}  {'TARGET':>6}  {'WEBSITE':16}  {'SLOT (UTC)':19}  {'STATUS':9}  {'ATT':>3}  {'PAGES':>5}  ITEMS"
    ]
    lines += [
        f"{j.id:>7}  {j.target_id:>6}  {j.website[:16]:16}  {j.slot_at:%Y-%m-%d %H:%M:%S}  {j.status:9}  "
        f"{j.attempts:>3}  {j.pages:>5}  {j.items_new} new, {j.items_updated} updated"
        + (f" ({j.progress})" if j.progress else "")
        for j in rows
    ]
    Output(quiet=quiet, as_json=as_json).result("\n".join(lines) if rows else "no jobs match",
                                               [r.as_dict() for r in rows])


@jobs.command("show")
@click.argument("run_id", type=int)
@database_option
@output_options
@click.pass_context
def show_cmd(ctx: click.Context, run_id: int, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """One job: its target, slot, outcome and every attempt (worker, timings, error)."""
    job = on_db(ctx, database_url, lambda engine: get_job(engine, run_id), action=Action.READ, read_only=True)
    lines = [
        f"job {job.id}: target {job.target_id} ({job.keywords!r} on {job.website}), "
        f"slot {job.slot_at:%Y-%m-%d %H:%M:%S}" + (" (run now)" if job.manual else ""),
        f"  status {job.status} after {job.attempts} attempt(s); {job.pages} pages, {job.items_new} new and "
        f"{job.items_updated} updated items" + (f"; {job.progress}" if job.progress else "")
        + (f"; error: {job.error}" if job.error else ""),
    ]
    for a in job.history:
        took = f"{a.seconds:.2f}s" if a.seconds is not None else "-"
        lines.append(f"  attempt {a.attempt} on {a.worker}: {a.status}, started {a.started_at:%H:%M:%S}, took {took}"
                     + (f", error: {a.error}" if a.error else ""))
    lines += [f"  detail page failed: {e}" for e in job.detail_errors]
    Output(quiet=quiet, as_json=as_json).result("\n".join(lines), job.as_dict())


def _when(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"not a time: {value!r}") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t
