"""Benchmark: the cost of one tick grows with the number of **due** targets, not with the table.

Two scratch databases per dialect: a *small* one of ``--small`` (10,000) targets and a *big* one of
``--big`` (1,000,000) targets, each with the same ``--due`` (1,000) due targets (one slot each) and the
rest not due (``next_run_at`` spread over the next day). One tick (``outbox.tick``, claim + plan +
outbox + advance, ``batch_size = --due``) is timed on each, interleaved (small, big, small, big, ...),
``--rounds`` times; between rounds the due targets are made due again and the outbox emptied (not
timed). Prints the medians, their ratio (the goal: big / small <= 2), and the plan of the claim query
(it must use the partial index ``ix_scrape_targets_due`` on ``next_run_at``).

    .venv/bin/python bench/tick_scale.py --database-url postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python bench/tick_scale.py --database-url sqlite:///

PostgreSQL scratch databases are created next to ``--database-url`` and dropped afterwards; SQLite
ones are files in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import event, text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402
from tests.support.db import add_targets, add_website, fresh_postgres_database  # noqa: E402

from crawlherd.db import create_engine, db_now, upgrade  # noqa: E402
from crawlherd.dispatch import outbox  # noqa: E402

HOUR = timedelta(hours=1)

_PG_FILL = """
INSERT INTO scrape_targets (website_id, keywords, location, schedule_kind, interval_seconds, timezone, anchor_at,
    jitter_ms, misfire_policy, backfill_limit, misfire_grace_seconds, active, next_run_at, created_at, updated_at)
SELECT :site, 'filler ' || i, 'Berlin', 'interval', 3600, 'UTC', now(), 0, 'latest', 0, 60, true,
    now() + interval '1 hour' + (i % 86400) * interval '1 second', now(), now()
FROM generate_series(1, :n) AS i
"""
_SQLITE_FILL = """
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < :n)
INSERT INTO scrape_targets (website_id, keywords, location, schedule_kind, interval_seconds, timezone, anchor_at,
    jitter_ms, misfire_policy, backfill_limit, misfire_grace_seconds, active, next_run_at, created_at, updated_at)
SELECT :site, 'filler ' || i, 'Berlin', 'interval', 3600, 'UTC', strftime('%Y-%m-%d %H:%M:%f', 'now'), 0, 'latest',
    0, 60, 1, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (3600 + i % 86400) || ' seconds'),
    strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now')
FROM seq
"""


def load() -> float:
    return os.getloadavg()[0]


async def build(engine: AsyncEngine, total: int, due: int) -> list[int]:
    """``due`` due targets (one slot each, inserted first) and ``total - due`` not due."""
    await upgrade(engine)
    site = await add_website(engine, name="tick-scale")
    async with engine.connect() as conn:
        now = await db_now(conn)
    ids = await add_targets(engine, site, due, every=HOUR, anchor=now - timedelta(seconds=10), misfire="latest")
    fill = _PG_FILL if engine.dialect.name == "postgresql" else _SQLITE_FILL
    async with engine.begin() as conn:
        await conn.execute(text(fill), {"site": site, "n": total - due})
    await vacuum(engine)
    return ids


async def vacuum(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        if engine.dialect.name == "postgresql":
            await conn.execute(text("VACUUM ANALYZE scrape_targets"))
            await conn.execute(text("VACUUM ANALYZE dispatch_outbox"))
        else:
            await conn.execute(text("ANALYZE"))


async def reset(engine: AsyncEngine, ids: list[int]) -> None:
    """The due targets due again (their slot 10 s ago), the outbox empty."""
    async with engine.begin() as conn:
        now = await db_now(conn)
        await conn.execute(text("DELETE FROM dispatch_outbox"))
        lo, hi = min(ids), max(ids)
        params: dict[str, Any] = {"lo": lo, "hi": hi}
        if engine.dialect.name == "postgresql":
            params["at"] = now - timedelta(seconds=10)
        else:
            params["at"] = (now - timedelta(seconds=10)).strftime("%Y-%m-%d %H:%M:%S.%f")
        await conn.execute(
            text("UPDATE scrape_targets SET next_run_at = :at, anchor_at = :at, last_scheduled = NULL "
                 "WHERE id BETWEEN :lo AND :hi"),
            params,
        )
    await vacuum(engine)


async def timed_tick(engine: AsyncEngine, due: int) -> float:
    t0 = time.perf_counter()
    result = await outbox.tick(engine, batch_size=due, max_slots_per_target=1000)
    elapsed = time.perf_counter() - t0
    assert result.targets == result.inserted == due, result
    return elapsed


async def claim_plan(engine: AsyncEngine, due: int) -> str:
    """The plan of the claim statement the tick really sends (captured, then EXPLAINed)."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if "ORDER BY scrape_targets.next_run_at" in statement:
            seen.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with engine.begin() as conn:
            now = await db_now(conn)
            await outbox.claim_due(conn, now=now, limit=due)
            await conn.rollback()
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", capture)
    statement, parameters = seen[0]
    explain = "EXPLAIN " if engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN "
    async with engine.connect() as conn:
        rows = (await conn.exec_driver_sql(explain + statement, parameters)).all()
    return "\n".join("    " + " ".join(str(c) for c in row) for row in rows)


async def run(urls: dict[str, str], due: int, rounds: int) -> None:
    engines = {size: create_engine(url) for size, url in urls.items()}
    try:
        ids: dict[str, list[int]] = {}
        for size, engine in engines.items():
            t0 = time.perf_counter()
            ids[size] = await build(engine, int(size), due)
            print(f"  built {int(size):,} targets ({due:,} due) in {time.perf_counter() - t0:.1f} s", flush=True)
        times: dict[str, list[float]] = {size: [] for size in engines}
        loads = [load()]
        for r in range(rounds):
            for size, engine in engines.items():
                await reset(engine, ids[size])
                times[size].append(await timed_tick(engine, due))
                loads.append(load())
            print("  round", r + 1, "  ".join(f"{int(s):,}: {t[-1] * 1000:.0f} ms" for s, t in times.items()),
                  f"(load {loads[-1]:.1f})", flush=True)
        small, big = (statistics.median(t) for t in times.values())
        dialect = next(iter(engines.values())).dialect.name
        print(f"\n{dialect}: one tick of {due:,} due targets, median of {rounds} interleaved rounds "
              f"(load average {min(loads):.1f}-{max(loads):.1f})")
        for (size, _t), median in zip(times.items(), (small, big), strict=True):
            print(f"  {int(size):>9,} targets: {median * 1000:7.1f} ms")
        print(f"  ratio big / small: {big / small:.2f} (goal <= 2)")
        print("  claim plan on the big table:")
        print(await claim_plan(engines[max(engines, key=int)], due))
    finally:
        for engine in engines.values():
            await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--due", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [str(args.small), str(args.big)]
    with ExitStack() as stack:
        if args.database_url.startswith("postgres"):
            urls = {s: stack.enter_context(fresh_postgres_database(args.database_url)) for s in sizes}
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            urls = {s: f"sqlite:///{tmp}/targets-{s}.db" for s in sizes}
        asyncio.run(run(urls, args.due, args.rounds))


if __name__ == "__main__":
    main()
