"""The console's queries use indexes (PostgreSQL EXPLAIN): every statement the overview, the targets
page and the jobs page run is captured as sent, then explained with sequential scans made as costly
as the planner allows: a big table read by a Seq Scan means no index can serve the query.
(``bench/web.py`` times the same pages on 100,000 targets and 1,000,000 runs.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert, text

from crawlherd.console.browse import browse_targets
from crawlherd.console.jobs import JobFilter, list_jobs
from crawlherd.console.overview import overview
from crawlherd.db import create_engine
from crawlherd.db.models import JobRun, ScrapeTarget, StoredItem
from tests.support.console import add_site

pytestmark = pytest.mark.postgres

BIG_TABLES = ("scrape_targets", "job_runs", "dispatch_outbox", "items")


@pytest.fixture(scope="module")
def pg(pg_database: str) -> str:
    asyncio.run(_fill(pg_database))
    return pg_database


async def _fill(url: str) -> None:
    engine = create_engine(url)
    try:
        await add_site(engine, "site", "https://jobs.example.com")
        now = datetime.now(UTC)
        async with engine.begin() as conn:
            await conn.execute(
                insert(ScrapeTarget),
                [
                    {
                        "website_id": 1,
                        "keywords": f"kw{i}",
                        "location": "",
                        "schedule_kind": "interval",
                        "interval_seconds": 3600.0,
                        "timezone": "UTC",
                        "jitter_ms": 0,
                        "misfire_policy": "skip",
                        "backfill_limit": 0,
                        "misfire_grace_seconds": 60.0,
                        "active": i % 7 != 0,
                        "next_run_at": now + timedelta(minutes=i - 100),
                        "created_at": now,
                        "updated_at": now,
                    }
                    for i in range(500)
                ],
            )
            await conn.execute(
                insert(JobRun),
                [
                    {
                        "target_id": 1 + i % 500,
                        "slot_at": now - timedelta(hours=i),
                        "job_id": f"{i:036d}",
                        "status": ("succeeded", "failed", "dead", "running")[i % 4],
                        "attempts": 1,
                        "pages": 1,
                        "items_new": 0,
                        "items_updated": 0,
                        "created_at": now,
                        "updated_at": now - timedelta(minutes=i),
                    }
                    for i in range(2000)
                ],
            )
            await conn.execute(
                insert(StoredItem),
                [
                    {
                        "fingerprint": f"{i:064x}",
                        "website_id": 1,
                        "target_id": 1,
                        "url": f"https://x/{i}",
                        "data": {},
                        "first_seen": now - timedelta(hours=i),
                        "last_seen": now,
                    }
                    for i in range(500)
                ],
            )
            await conn.execute(text("ANALYZE"))
    finally:
        await engine.dispose()


async def _plans(url: str, work: Any) -> list[tuple[str, str]]:
    """(statement, plan) of every SELECT ``work(engine)`` runs."""
    engine = create_engine(url)
    seen: list[tuple[str, Any]] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM" in statement.upper():
            seen.append((statement, parameters))

    try:
        await work(engine)
        event.remove(engine.sync_engine, "before_cursor_execute", capture)
        out = []
        async with engine.connect() as conn:
            await conn.execute(text("SET enable_seqscan = off"))
            for statement, parameters in seen:
                rows = (await conn.exec_driver_sql("EXPLAIN " + statement, parameters)).all()
                out.append((statement, "\n".join(r[0] for r in rows)))
        return out
    finally:
        await engine.dispose()


#: Partial indexes: scanning one whole reads only the rows its predicate selects (active targets, pending rows).
PARTIAL = ("ix_scrape_targets_due", "ix_dispatch_outbox_pending")


def _assert_indexed(plans: list[tuple[str, str]]) -> None:
    """No big table is read by a Seq Scan; an index scanned without an Index Cond is a partial index or
    sits under a Limit (a keyset page stops after one page)."""
    assert plans
    for statement, plan in plans:
        nodes = plan.split("->")
        for node in nodes:
            for table in BIG_TABLES:
                assert f"Seq Scan on {table} " not in node + " ", f"{statement}\n{plan}"
                if f" on {table} " in node + " " and "Index" in node and "Index Cond" not in node:
                    assert any(p in node for p in PARTIAL) or "Limit" in plan, f"{statement}\n{plan}"


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(lambda e: overview(e), id="overview"),
        pytest.param(lambda e: browse_targets(e), id="targets"),
        pytest.param(lambda e: browse_targets(e, state="due", after_id=200), id="targets-due-page-5"),
        pytest.param(lambda e: list_jobs(e), id="jobs"),
        pytest.param(lambda e: list_jobs(e, JobFilter(status="dead", before_id=1500)), id="jobs-dead"),
        pytest.param(lambda e: list_jobs(e, JobFilter(target_id=3)), id="jobs-of-a-target"),
    ],
)
async def test_console_queries_use_indexes(pg: str, page: Any) -> None:
    _assert_indexed(await _plans(pg, page))
