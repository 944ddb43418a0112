"""Retention of job runs and items (issue 11, point 6): ``prune_history`` on a real SQLite file and a
real PostgreSQL database, and ``crawlherd db prune`` end to end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.cli import main
from crawlherd.db import ScrapeTarget, Website
from crawlherd.db.models import JobRun, StoredItem
from crawlherd.dispatch.retention import prune_history
from crawlherd.dispatch.targets import import_targets
from crawlherd.errors import ConfigurationError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NOW = datetime.now(UTC)


async def seed(engine: AsyncEngine) -> None:
    """Runs in every status, finished 10 and 200 days ago; items seen 10 and 400 days ago."""
    await import_targets(engine, EXAMPLES / "targets.toml")
    async with engine.begin() as conn:
        target_id = (await conn.execute(select(ScrapeTarget.id).limit(1))).scalar_one()
        website_id = (await conn.execute(select(Website.id).limit(1))).scalar_one()
        runs = []
        for days in (10, 200):
            for status in ("queued", "running", "succeeded", "failed", "dead"):
                at = NOW - timedelta(days=days)
                finished = at if status in ("succeeded", "failed", "dead") else None
                runs.append(
                    {
                        "target_id": target_id,
                        "slot_at": at + timedelta(seconds=len(runs)),
                        "job_id": f"job-{len(runs)}",
                        "status": status,
                        "finished_at": finished,
                        "created_at": at,
                        "updated_at": at,
                    }
                )
        await conn.execute(insert(JobRun), runs)
        items = [
            {
                "fingerprint": f"fp{days}-{i}",
                "website_id": website_id,
                "target_id": target_id,
                "url": f"http://x/{i}",
                "data": {},
                "first_seen": NOW - timedelta(days=days),
                "last_seen": NOW - timedelta(days=days),
            }
            for days in (10, 400)
            for i in range(3)
        ]
        await conn.execute(insert(StoredItem), items)


async def left(engine: AsyncEngine) -> tuple[list[tuple[str, int]], int]:
    async with engine.connect() as conn:
        runs = (await conn.execute(select(JobRun.status, JobRun.created_at))).all()
        items = len((await conn.execute(select(StoredItem.id))).all())
    ages = sorted((status, (NOW - created.replace(tzinfo=UTC)).days) for status, created in runs)
    return ages, items


async def test_prune_deletes_only_finished_old_runs_and_unseen_items(engine: AsyncEngine) -> None:
    await seed(engine)
    dry = await prune_history(
        engine, runs_older_than=timedelta(days=90), items_unseen_for=timedelta(days=180), dry_run=True
    )
    assert (dry.runs, dry.items) == (3, 3)
    assert len((await left(engine))[0]) == 10
    counts = await prune_history(
        engine, runs_older_than=timedelta(days=90), items_unseen_for=timedelta(days=180), chunk=2
    )
    assert (counts.runs, counts.items) == (3, 3)
    runs, items = await left(engine)
    assert items == 3
    # queued and running rows are never pruned, however old; finished ones 10 days old are kept
    assert [s for s, age in runs if age >= 199] == ["queued", "running"]
    assert len([s for s, age in runs if age < 11]) == 5
    again = await prune_history(engine, runs_older_than=timedelta(days=90), items_unseen_for=timedelta(days=180))
    assert (again.runs, again.items) == (0, 0)


async def test_prune_keeps_what_has_no_retention_and_refuses_too_short(engine: AsyncEngine) -> None:
    await seed(engine)
    counts = await prune_history(engine)
    assert (counts.runs, counts.items) == (0, 0)
    with pytest.raises(ConfigurationError, match="keep job runs at least 1 day"):
        await prune_history(engine, runs_older_than=timedelta(hours=1))


def test_db_prune_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from crawlherd.db import create_engine, upgrade

    url = f"sqlite:///{tmp_path}/config.db"
    monkeypatch.setenv("CRAWLHERD_DATABASE_URL", url)
    monkeypatch.chdir(tmp_path)

    async def prepare() -> None:
        await upgrade(url)
        engine = create_engine(url)
        try:
            await seed(engine)
        finally:
            await engine.dispose()

    asyncio.run(prepare())
    runner = CliRunner()
    dry = runner.invoke(main, ["db", "prune", "--items-unseen-for", "180d", "--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert "would delete 3 job run(s) and 3 item(s)" in dry.output  # runs: the 90d default setting
    out = runner.invoke(main, ["db", "prune", "--runs-older-than", "never"], catch_exceptions=False)
    assert out.exit_code == 0 and "deleted 0 job run(s) (job runs kept: no retention) and 0 item(s)" in out.output
    monkeypatch.setenv("CRAWLHERD_ITEMS_RETENTION", "180d")
    out = runner.invoke(main, ["db", "prune"], catch_exceptions=False)
    assert out.exit_code == 0 and "deleted 3 job run(s) and 3 item(s)" in out.output
    bad = runner.invoke(main, ["db", "prune", "--runs-older-than", "soon"])
    assert bad.exit_code == 2 and "--runs-older-than" in bad.output and "'soon'" in bad.output
    short = runner.invoke(main, ["db", "prune", "--runs-older-than", "2h"])
    assert short.exit_code != 0 and "keep job runs at least 1 day" in short.output
    assert "Traceback" not in short.output + bad.output
