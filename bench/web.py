"""Benchmark: the console's overview, targets and jobs pages on a big config DB (PostgreSQL), against
the same pages on a small one measured in the same run.

    python bench/web.py --database-url postgresql://postgres@127.0.0.1:5432/test \\
        --targets 100000 --runs 1000000

Two scratch databases are created next to ``--database-url`` (and dropped afterwards): a small one
(1% of the sizes) as the baseline and the big one. Rows are made in the database itself
(``generate_series``). Each page is rendered through the real ASGI app (httpx, in process) ``--repeat``
times; the median is printed, with its ratio to the small database's: a page whose queries use
indexes costs about the same at any size. The statements of each page are then EXPLAINed on the big
database and any sequential scan of a big table is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
from sqlalchemy import event, text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402
from tests.support.db import fresh_postgres_database  # noqa: E402

from crawlherd.db import create_engine, upgrade  # noqa: E402
from crawlherd.web.app import create_app  # noqa: E402

PAGES = {
    "overview": "/overview/live",
    "targets (first page)": "/targets",
    "targets (page 1000)": "/targets?after={deep_target}",
    "targets (due)": "/targets?state=due",
    "targets (search)": "/targets?q=kw{one_target}",
    "jobs (first page)": "/jobs",
    "jobs (dead)": "/jobs?status=dead",
    "jobs (one target)": "/jobs?target={one_target}",
    "jobs (deep page)": "/jobs?before={deep_run}",
    "target page (lineage, why)": "/targets/{one_target}",
}

FILL = """
INSERT INTO websites (name, base_url, search_url_template, requires_playwright, pagination_type, pagination,
                      extraction, metadata, min_delay, max_concurrency, robots_policy, created_at, updated_at)
SELECT 'site' || w, 'https://s' || w || '.example.com', 'https://s' || w || '.example.com/s?q={keywords}', false,
       'none', '{}', '{}', '{}', 1.0, 2, 'obey', now(), now()
FROM generate_series(1, 20) AS w;

INSERT INTO scrape_targets (website_id, keywords, location, schedule_kind, interval_seconds, timezone, jitter_ms,
                            misfire_policy, backfill_limit, misfire_grace_seconds, active, next_run_at,
                            created_at, updated_at)
SELECT 1 + t % 20, 'kw' || t, 'loc' || (t % 50), 'interval', 3600, 'UTC', 0, 'skip', 0, 60, t % 10 <> 0,
       now() + make_interval(secs => (t % 7200) - 600), now() - interval '30 days', now()
FROM generate_series(1, :targets) AS t;

INSERT INTO dispatch_outbox (target_id, slot_at, key, status, attempts, body, created_at, published_at)
SELECT 1 + r % :targets, now() - make_interval(hours => r / :targets, secs => r % 3600), 'k' || r,
       CASE WHEN r % 1000 = 0 THEN 'pending' ELSE 'published' END, 1, '{}',
       now() - make_interval(mins => r % 2880), now()
FROM generate_series(1, :runs) AS r;

INSERT INTO job_runs (target_id, slot_at, job_id, status, attempts, started_at, finished_at, pages, items_new,
                      items_updated, worker, created_at, updated_at)
SELECT o.target_id, o.slot_at, lpad(o.id::text, 36, '0'),
       (ARRAY['succeeded', 'succeeded', 'succeeded', 'failed', 'dead', 'running'])[1 + o.id % 6], 1,
       o.created_at, o.created_at, 3, 1, 2, 'worker-' || (o.id % 8), o.created_at, o.created_at
FROM dispatch_outbox o;

INSERT INTO items (fingerprint, website_id, target_id, url, data, first_seen, last_seen)
SELECT lpad(to_hex(i), 64, '0'), 1 + i % 20, 1 + i % :targets, 'https://x/' || i, '{"title": "job"}',
       now() - make_interval(hours => i % 200), now() - make_interval(hours => i % 20)
FROM generate_series(1, :items) AS i;
"""


async def fill(url: str, targets: int, runs: int) -> None:
    await upgrade(url)
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in filter(str.strip, FILL.split(";")):
                sql = statement.replace(":targets", str(targets)).replace(":runs", str(runs))
                sql = sql.replace(":items", str(max(1000, runs // 10)))
                await conn.exec_driver_sql(sql)
        async with engine.connect() as conn:  # as autovacuum would have: visibility map and statistics
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE")
    finally:
        await engine.dispose()


async def time_pages(url: str, repeat: int, deep: dict[str, int]) -> dict[str, float]:
    engine = create_engine(url, pool_size=2)
    out: dict[str, float] = {}
    try:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            for name, path in PAGES.items():
                path = path.format(**deep)
                assert (await client.get(path)).status_code == 200, path  # warm-up
                times = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    response = await client.get(path)
                    times.append(time.perf_counter() - start)
                    assert response.status_code == 200, path
                out[name] = statistics.median(times)
    finally:
        await engine.dispose()
    return out


async def seq_scans(url: str, deep: dict[str, int]) -> list[str]:
    """Pages whose statements read a big table by a sequential scan."""
    engine = create_engine(url, pool_size=2)
    found: list[str] = []
    try:
        for name, path in PAGES.items():
            seen: list[tuple[str, object]] = []

            def capture(conn: object, cursor: object, statement: str, params: object, *_: object) -> None:
                if statement.lstrip().upper().startswith("SELECT") and " FROM " in statement.upper():
                    seen.append((statement, params))  # noqa: B023

            event.listen(engine.sync_engine, "before_cursor_execute", capture)
            transport = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                await client.get(path.format(**deep))
            event.remove(engine.sync_engine, "before_cursor_execute", capture)
            async with engine.connect() as conn:
                for statement, params in seen:
                    plan = "\n".join(r[0] for r in (await conn.exec_driver_sql("EXPLAIN " + statement, params)).all())
                    for table in ("scrape_targets", "job_runs", "dispatch_outbox", "items"):
                        if f"Seq Scan on {table}" in plan:
                            found.append(f"{name}: Seq Scan on {table}")
    finally:
        await engine.dispose()
    return found


async def deep_ids(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        deep_target = (await conn.execute(text("SELECT max(id) - 50 * 1000 FROM scrape_targets"))).scalar_one()
        deep_run = (await conn.execute(text("SELECT max(id) - 50 * 1000 FROM job_runs"))).scalar_one()
        middle = (await conn.execute(text("SELECT max(id) / 2 FROM scrape_targets"))).scalar_one()
    return {"deep_target": max(1, int(deep_target)), "deep_run": max(1, int(deep_run)), "one_target": int(middle)}


async def measure(url: str, label: str, targets: int, runs: int, repeat: int) -> tuple[dict[str, float], list[str]]:
    start = time.perf_counter()
    await fill(url, targets, runs)
    print(f"{label}: {targets:,} targets, {runs:,} runs made in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    engine = create_engine(url)
    deep = await deep_ids(engine)
    await engine.dispose()
    timings = await time_pages(url, repeat, deep)
    return timings, (await seq_scans(url, deep) if label == "big" else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--targets", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    scans: list[str] = []
    for label, targets, runs in (("small", args.targets // 100, args.runs // 100), ("big", args.targets, args.runs)):
        with fresh_postgres_database(args.database_url) as url:
            results[label], found = asyncio.run(measure(url, label, targets, runs, args.repeat))
            scans += found
    print(f"\n{'page':32} {'small (ms)':>11} {'big (ms)':>10} {'big/small':>10}")
    for name in PAGES:
        small, big = results["small"][name] * 1000, results["big"][name] * 1000
        print(f"{name:32} {small:11.1f} {big:10.1f} {big / small:10.2f}")
    print("\nsequential scans of big tables on the big database:", ", ".join(scans) or "none")


if __name__ == "__main__":
    main()
