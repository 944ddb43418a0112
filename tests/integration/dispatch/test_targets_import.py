"""Targets import into a real SQLite / PostgreSQL config DB: all or nothing, upserts, enable/disable,
preview; and the migrations match the models on both."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import Base, ScrapeTarget, Website, current_revision, head_revision
from crawlherd.db.migrate import VERSION_TABLE
from crawlherd.dispatch import targets as targets_module
from crawlherd.dispatch.targets import get_target, import_targets, list_targets, preview_target, set_active
from crawlherd.errors import CrawlherdError, TargetsFileError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


async def counts(engine: AsyncEngine) -> tuple[int, int]:
    async with engine.connect() as conn:
        sites = (await conn.execute(select(func.count()).select_from(Website))).scalar_one()
        targets = (await conn.execute(select(func.count()).select_from(ScrapeTarget))).scalar_one()
    return sites, targets


async def test_migrations_match_the_models(engine: AsyncEngine) -> None:
    assert await current_revision(engine) == head_revision()

    def diff(conn: Connection) -> list[Any]:
        return list(
            compare_metadata(MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}), Base.metadata)
        )

    async with engine.connect() as conn:
        assert await conn.run_sync(diff) == []


async def test_import_example_then_reimport_is_a_no_op(engine: AsyncEngine) -> None:
    result = await import_targets(engine, EXAMPLES / "targets.toml")
    assert (result.websites_created, result.targets_created) == (2, 7)
    assert await counts(engine) == (2, 7)
    again = await import_targets(engine, EXAMPLES / "targets.toml")
    assert (again.websites_updated, again.targets_created, again.targets_unchanged) == (2, 0, 7)
    rows = await list_targets(engine, website="demo-jobs")
    assert len(rows) == 6 and {r.location for r in rows} == {"berlin", "london", "remote"}
    assert all(0 <= r.jitter_ms < 600_000 for r in rows) and len({r.jitter_ms for r in rows}) > 1


async def test_bad_file_changes_nothing(engine: AsyncEngine, tmp_path: Path) -> None:
    await import_targets(engine, EXAMPLES / "targets.toml")
    before = [(t.id, t.schedule, t.next_run_at) for t in await list_targets(engine)]
    bad = tmp_path / "bad.toml"
    text = (EXAMPLES / "targets.toml").read_text()
    bad.write_text(text.replace('every = "6h"', 'every = "1h"').replace('cron = "30 7 * * 1-5"', 'cron = "61 7 * * *"'))
    with pytest.raises(TargetsFileError, match=r"targets\[1\]\.cron"):
        await import_targets(engine, bad)
    assert [(t.id, t.schedule, t.next_run_at) for t in await list_targets(engine)] == before


async def test_failure_in_the_middle_of_the_import_rolls_everything_back(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = targets_module._first_run
    calls = 0

    def failing(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 4:  # websites and three targets are already written in this transaction
            raise OperationalError("INSERT", {}, Exception("disk I/O error"))
        return real(*args)

    monkeypatch.setattr(targets_module, "_first_run", failing)
    with pytest.raises(TargetsFileError, match=r"\(database\): nothing imported: OperationalError"):
        await import_targets(engine, EXAMPLES / "targets.toml")
    assert await counts(engine) == (0, 0)


async def test_targets_may_name_a_website_already_in_the_database(engine: AsyncEngine, tmp_path: Path) -> None:
    await import_targets(engine, EXAMPLES / "targets.toml")
    extra = tmp_path / "more.yaml"
    extra.write_text("targets:\n  - website: demo-jobs-browse\n    keywords: [go, zig]\n    every: 2h\n")
    result = await import_targets(engine, extra)
    assert result.targets_created == 2 and await counts(engine) == (2, 9)
    missing = tmp_path / "missing.yaml"
    missing.write_text("targets:\n  - website: elsewhere\n    keywords: [go]\n    every: 2h\n")
    with pytest.raises(TargetsFileError, match="line 2, targets\\[0\\].website: no website named 'elsewhere'"):
        await import_targets(engine, missing)


async def test_schedule_change_recomputes_next_run(engine: AsyncEngine, tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    base = (
        "websites:\n  - name: s\n    base_url: https://s.example\n    search_url_template: 'https://s.example/?q={keywords}'\n"
        "targets:\n  - website: s\n    keywords: [a]\n    every: {every}\n"
    )
    path.write_text(base.replace("{every}", "1d"))
    await import_targets(engine, path)
    (first,) = await list_targets(engine)
    path.write_text(base.replace("{every}", "30m"))
    result = await import_targets(engine, path)
    assert result.targets_updated == 1
    (second,) = await list_targets(engine)
    assert second.schedule == "every 30m" and second.next_run_at <= first.next_run_at


async def test_enable_disable_preview(engine: AsyncEngine) -> None:
    await import_targets(engine, EXAMPLES / "targets.toml")
    (cron_target,) = await list_targets(engine, website="demo-jobs-browse")
    off = await set_active(engine, cron_target.id, False)
    assert not off.active
    on = await set_active(engine, cron_target.id, True)
    assert on.active and on.next_run_at >= cron_target.next_run_at
    runs = await preview_target(engine, cron_target.id, 5)
    assert len(runs) == 5 and runs[0][1] == on.next_run_at
    berlin = ZoneInfo("Europe/Berlin")
    assert all(slot.astimezone(berlin).weekday() < 5 for slot, _ in runs)  # "30 7 * * 1-5"
    assert {slot.astimezone(berlin).strftime("%H:%M") for slot, _ in runs} == {"07:30"}
    assert all(b[0] - a[0] >= timedelta(hours=23) for a, b in zip(runs, runs[1:], strict=False))
    with pytest.raises(CrawlherdError, match="no scrape target with id 999"):
        await get_target(engine, 999)
    with pytest.raises(CrawlherdError, match="no scrape target"):
        await set_active(engine, 999, True)
