"""Benchmark: N due targets dispatched through the tick + relay vs a naive loop, in the same run.

The naive loop is the seed's sequence diagram: per target, one SELECT (of the next due target), one
publish, one UPDATE, one commit. The tick + relay claims targets in batches, writes the outbox in
multi-row INSERTs and publishes with bounded concurrency, marking in batches.

    python bench/dispatch.py --database-url postgresql://postgres@127.0.0.1:5432/test \\
        --broker-url amqp://guest:guest@127.0.0.1:5672/ --targets 100000

``--database-url`` names a server database (PostgreSQL: a scratch database is created next to it and
dropped afterwards) or ``sqlite:///path`` (default: a scratch file). ``--broker-url`` is any broker URL
(``redis://...``, ``amqp://...``: a scratch key prefix / queue is used and removed afterwards;
``sqlite://`` = the config DB's own file, the embedded default), or ``memory://`` (the default) for the
in-process broker (publishing costs next to nothing: this isolates the database side).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import delete, func, select, text, update  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402
from tests.support.db import add_targets, add_website, fresh_postgres_database  # noqa: E402
from tests.support.real_brokers import delete_queues  # noqa: E402

from crawlherd._redact import redact_url  # noqa: E402
from crawlherd.brokers import open_broker  # noqa: E402
from crawlherd.brokers.base import Broker  # noqa: E402
from crawlherd.db import DispatchOutbox, ScrapeTarget, Website, create_engine, db_now, upgrade  # noqa: E402
from crawlherd.messages import JobMessage, encode_job  # noqa: E402
from crawlherd.service.dispatch_service import DispatchService  # noqa: E402
from crawlherd.service.schedule import make_schedule, plan_slots  # noqa: E402
from crawlherd.sitespec import SiteSpec  # noqa: E402

HOUR = timedelta(hours=1)


def scratch_broker_url(url: str, database_url: str) -> str:
    """Benchmark brokers get their own queue / key prefix (removed afterwards); ``sqlite://`` with no
    path means the config DB's own file (the embedded default)."""
    tag = f"bench{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in url else "?"
    if url in ("sqlite://", "sqlite:///"):
        return database_url
    if url.startswith(("redis://", "rediss://")) and "prefix=" not in url:
        return f"{url}{sep}prefix={tag}"
    if url.startswith(("amqp://", "amqps://")) and "queue=" not in url:
        return f"{url}{sep}queue={tag}"
    return url


@asynccontextmanager
async def broker_for(url: str) -> AsyncIterator[Broker]:
    async with open_broker(url) as broker:
        try:
            yield broker
        finally:
            await cleanup(url, broker)


async def cleanup(url: str, broker: Broker) -> None:
    """Remove what the benchmark put into a shared Redis / RabbitMQ."""
    if url.startswith(("amqp://", "amqps://")):
        await delete_queues(broker)
    elif url.startswith(("redis://", "rediss://")):
        import redis.asyncio as aioredis

        prefix = url.split("prefix=", 1)[1].split("&", 1)[0]
        client = aioredis.from_url(url.split("?", 1)[0])
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
            for start in range(0, len(keys), 1000):
                await client.delete(*keys[start : start + 1000])
        finally:
            await client.aclose()


async def make_due(engine: AsyncEngine, site: int | None, n: int) -> int:
    """``n`` targets each with exactly one due slot (10 s ago)."""
    now = await _now(engine)
    async with engine.begin() as conn:
        await conn.execute(delete(DispatchOutbox))
        await conn.execute(delete(ScrapeTarget))
    if site is None:
        site = await add_website(engine, name=f"bench-{uuid.uuid4().hex[:6]}")
    await add_targets(engine, site, n, every=HOUR, anchor=now - timedelta(seconds=10), misfire="latest")
    # Same starting state for both contestants: no dead rows from the previous round, fresh statistics.
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE"))
    return site


async def _now(engine: AsyncEngine) -> Any:
    async with engine.connect() as conn:
        return await db_now(conn)


async def tick_and_relay(engine: AsyncEngine, broker: Broker, batch: int) -> int:
    dispatcher = DispatchService(engine, broker, batch_size=batch, relay_batch=batch, publish_concurrency=64)
    tick, relay = await dispatcher.run_once()
    assert tick.inserted == relay.published, (tick, relay)
    return relay.published


async def naive_loop(engine: AsyncEngine, broker: Broker) -> int:
    """One SELECT, one publish, one UPDATE per target.

    PostgreSQL: all three in one transaction holding the target's row lock (``FOR UPDATE SKIP LOCKED``).
    SQLite: the SELECT and the UPDATE in two transactions with the publish between them -- a publish
    inside the write transaction would deadlock with a broker in the same file (``database is locked``).
    """
    T, W = ScrapeTarget, Website  # noqa: N806
    done = 0
    hold_lock = engine.dialect.name == "postgresql"
    db_clock: Any = func.now() if hold_lock else func.strftime("%Y-%m-%d %H:%M:%f", "now")
    query = (
        select(T.id, T.website_id, T.keywords, T.location, T.interval_seconds, T.anchor_at, T.next_run_at)
        .add_columns(W.spec, db_clock.label("db_now"))
        .join(W, W.id == T.website_id)
        .where(T.active, T.next_run_at <= db_clock)
        .order_by(T.next_run_at)
        .limit(1)
        .with_for_update(of=T, skip_locked=True)
    )

    async def publish_and_plan(row: Any) -> Any:
        nonlocal done
        now = row.db_now if isinstance(row.db_now, datetime) else datetime.fromisoformat(row.db_now)
        now = now.replace(tzinfo=UTC) if now.tzinfo is None else now
        schedule = make_schedule(kind="interval", interval_seconds=row.interval_seconds, anchor_at=row.anchor_at)
        plan = plan_slots(schedule, next_slot=row.next_run_at, now=now, misfire="latest")
        site = SiteSpec.model_validate(row.spec)
        for slot in plan.slots:
            message = JobMessage.for_slot(
                target_id=row.id,
                slot_at=slot,
                created_at=now,
                website_id=row.website_id,
                site=site,
                search_url=site.search_url(keywords=row.keywords, location=row.location),
                keywords_used=row.keywords,
                location_used=row.location or None,
            )
            await broker.publish(encode_job(message), key=message.idempotency_key)
            done += 1
        return update(T).where(T.id == row.id).values(next_run_at=plan.next_slot, last_scheduled=plan.slots[-1])

    while True:
        async with engine.begin() as conn:
            row = (await conn.execute(query)).first()
            if row is None:
                return done
            if hold_lock:
                await conn.execute(await publish_and_plan(row))
                continue
        advance = await publish_and_plan(row)
        async with engine.begin() as conn:
            await conn.execute(advance)


async def run(database_url: str, broker_url: str, n: int, batch: int, naive_n: int) -> None:
    broker_url = scratch_broker_url(broker_url, database_url)
    engine = create_engine(database_url, pool_size=8)
    try:
        await upgrade(engine)
        async with broker_for(broker_url) as broker:
            site = await make_due(engine, None, n)
            t0 = time.perf_counter()
            fast = await tick_and_relay(engine, broker, batch)
            fast_s = time.perf_counter() - t0
            await make_due(engine, site, naive_n)
            t0 = time.perf_counter()
            slow = await naive_loop(engine, broker)
            slow_s = time.perf_counter() - t0
    finally:
        await engine.dispose()
    assert fast == n and slow == naive_n, (fast, slow, n, naive_n)
    fast_rate, slow_rate = n / fast_s, naive_n / slow_s
    print(f"database {redact_url(database_url)} -> broker {redact_url(broker_url)}")
    print(f"  tick + relay (batch {batch}): {n:7d} targets {fast_s:8.2f} s  {fast_rate:8.0f} targets/s")
    print(f"  naive loop (per target)    : {naive_n:7d} targets {slow_s:8.2f} s  {slow_rate:8.0f} targets/s")
    print(f"  ratio: tick + relay dispatches {fast_rate / slow_rate:.1f}x as many targets/s as the naive loop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="sqlite:///")
    parser.add_argument("--broker-url", default="memory://")
    parser.add_argument("--targets", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--naive-targets", type=int, default=None, help="targets for the naive loop (default: --targets); rates compare"
    )
    args = parser.parse_args()
    url = args.database_url
    naive_n = args.naive_targets or args.targets
    if url.startswith("postgres"):
        with fresh_postgres_database(url) as scratch:
            asyncio.run(run(scratch, args.broker_url, args.targets, args.batch, naive_n))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = url[len("sqlite:///") :] or os.path.join(tmp, "bench.db")
            asyncio.run(run(f"sqlite:///{path}", args.broker_url, args.targets, args.batch, naive_n))


if __name__ == "__main__":
    main()
