"""Benchmark: ``crawlherd dispatch --once`` against the raw broker driver, in the same run.

For each broker, each round runs the raw-driver baseline and then crawlherd, interleaved (baseline,
crawlherd, baseline, crawlherd, ...); the medians of the rounds are printed with their ratio:

- **crawlherd**: ``--targets`` scrape targets, each with one due slot, in a scratch PostgreSQL
  database (created next to ``--database-url``, dropped afterwards), dispatched by
  ``DispatchService.run_once()`` (what ``crawlherd dispatch --once`` runs): tick (claim, outbox, advance)
  and relay (lease, publish with broker confirms, mark published) until every slot is confirmed. The
  targets are written before the clock starts; the timed part is the whole dispatch.
- **raw aio-pika**: the same number of job messages (built beforehand, same size as crawlherd's),
  persistent, on a channel with publisher confirms, ``--in-flight`` (500) publishes outstanding, to a
  durable classic queue like the one crawlherd's broker declares.
- **raw redis-py**: the same messages ``XADD``-ed to a stream, pipelined ``--in-flight`` (500) per
  round trip (no transaction).

    .venv/bin/python bench/dispatch.py --database-url postgresql://postgres@127.0.0.1:5432/test \\
        --amqp-url amqp://guest:guest@127.0.0.1:5672/ --redis-url redis://127.0.0.1:6379/0 \\
        --targets 10000 --rounds 3

Every queue and key is a scratch one, removed afterwards. ``--brokers amqp`` / ``redis`` runs one only;
``--database-url sqlite:///`` runs the crawlherd side on a scratch SQLite file instead.

``--floor`` adds, to each round, crawlherd dispatching to the in-process ``memory://`` broker (a
publish costs next to nothing): the database's and crawlherd's own share, the rate no broker can
raise -- ``floor / raw`` is the highest ratio this database side allows against each raw driver.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aio_pika  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from sqlalchemy import delete, select, text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402
from tests.support.db import add_targets, add_website, fresh_postgres_database  # noqa: E402
from tests.support.real_brokers import delete_queues  # noqa: E402

from crawlherd.brokers import open_broker  # noqa: E402
from crawlherd.brokers.base import Broker  # noqa: E402
from crawlherd.db import DispatchOutbox, ScrapeTarget, create_engine, db_now, upgrade  # noqa: E402
from crawlherd.dispatch.dispatch_service import DispatchOptions, DispatchService  # noqa: E402

HOUR = timedelta(hours=1)


def load() -> float:
    """The 1-minute load average (the machine is shared: say it beside every figure)."""
    return os.getloadavg()[0]


# -- crawlherd ----------------------------------------------------------------------------------------


async def make_due(engine: AsyncEngine, site: int, n: int) -> None:
    """``n`` targets each with exactly one due slot (10 s ago); empty outbox; fresh statistics."""
    async with engine.begin() as conn:
        await conn.execute(delete(DispatchOutbox))
        await conn.execute(delete(ScrapeTarget))
        now = await db_now(conn)
    await add_targets(engine, site, n, every=HOUR, anchor=now - timedelta(seconds=10), misfire="latest")
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE"))


async def sample_bodies(engine: AsyncEngine, n: int) -> list[bytes]:
    """``n`` job bodies as crawlherd wrote them (for the baselines: same sizes)."""
    async with engine.connect() as conn:
        bodies = [b.encode() for b in (await conn.execute(select(DispatchOutbox.body).limit(n))).scalars()]
    return [bodies[i % len(bodies)] for i in range(n)]


async def crawlherd_once(engine: AsyncEngine, broker: Broker, n: int, options: dict[str, Any]) -> float:
    service = DispatchService(engine, broker, DispatchOptions(**options))
    t0 = time.perf_counter()
    tick, relay = await service.run_once()
    elapsed = time.perf_counter() - t0
    assert tick.inserted == relay.published == n and relay.failed == 0, (tick, relay, n)
    return elapsed


# -- raw baselines --------------------------------------------------------------------------------


async def raw_amqp(url: str, bodies: list[bytes], in_flight: int) -> float:
    """Persistent publishes with publisher confirms, ``in_flight`` outstanding, to a durable queue."""
    queue = f"bench.raw.{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True, arguments={"x-queue-type": "classic"})
        exchange = channel.default_exchange
        todo = iter(bodies)

        async def worker() -> None:
            for body in todo:
                await exchange.publish(aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), queue)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - t0
        await channel.queue_delete(queue)
    finally:
        await connection.close()
    return elapsed


async def raw_redis(url: str, bodies: list[bytes], in_flight: int) -> float:
    """``XADD`` pipelined ``in_flight`` per round trip (no transaction)."""
    stream = f"bench:raw:{uuid.uuid4().hex[:10]}"
    client = aioredis.from_url(url)
    try:
        t0 = time.perf_counter()
        for start in range(0, len(bodies), in_flight):
            async with client.pipeline(transaction=False) as pipe:
                for i, body in enumerate(bodies[start : start + in_flight], start):
                    pipe.xadd(stream, {"k": f"{i}", "b": body})
                await pipe.execute()
        elapsed = time.perf_counter() - t0
        await client.delete(stream)
    finally:
        await client.aclose()
    return elapsed


# -- the run --------------------------------------------------------------------------------------


@asynccontextmanager
async def scratch_broker(url: str) -> AsyncIterator[Broker]:
    """crawlherd's broker on a scratch queue / key prefix, removed afterwards."""
    tag = f"bench{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in url else "?"
    if url.startswith("amqp"):
        async with open_broker(f"{url}{sep}queue={tag}") as broker:
            try:
                yield broker
            finally:
                await delete_queues(broker)
        return
    async with open_broker(f"{url}{sep}prefix={tag}") as broker:
        try:
            yield broker
        finally:
            client = aioredis.from_url(url.split("?", 1)[0])
            try:
                keys = [key async for key in client.scan_iter(match=f"{tag}:*", count=1000)]
                if keys:
                    await client.delete(*keys)
            finally:
                await client.aclose()


Timed = Callable[[], Coroutine[Any, Any, float]]


async def run(args: argparse.Namespace, database_url: str) -> None:
    n, rounds = args.targets, args.rounds
    options = {
        "batch_size": args.batch,
        "relay_batch": args.relay_batch,
        "publish_concurrency": args.publish_concurrency or args.in_flight,
    }
    engine = create_engine(database_url, pool_size=8)
    brokers = {"amqp": args.amqp_url, "redis": args.redis_url}
    results: dict[str, dict[str, list[float]]] = {}
    loads: list[float] = [load()]
    try:
        await upgrade(engine)
        site = await add_website(engine, name=f"bench-{uuid.uuid4().hex[:6]}")
        await make_due(engine, site, min(n, 1000))
        async with scratch_broker(brokers[args.brokers[0]]) as broker:  # warm-up; also gives real bodies
            await crawlherd_once(engine, broker, min(n, 1000), options)
        bodies = await sample_bodies(engine, n)
        for name in args.brokers:
            url = brokers[name]
            raw: Timed
            if name == "amqp":
                raw = lambda url=url: raw_amqp(url, bodies, args.in_flight)  # noqa: E731
            else:
                raw = lambda url=url: raw_redis(url, bodies, args.in_flight)  # noqa: E731
            per = results[name] = {"raw": [], "crawlherd": [], "floor": []}
            async with scratch_broker(url) as broker:
                for r in range(rounds):
                    per["raw"].append(n / await raw())
                    await make_due(engine, site, n)
                    per["crawlherd"].append(n / await crawlherd_once(engine, broker, n, options))
                    floor = ""
                    if args.floor:
                        await make_due(engine, site, n)
                        async with open_broker("memory://") as memory:
                            per["floor"].append(n / await crawlherd_once(engine, memory, n, options))
                        floor = f"  memory:// {per['floor'][-1]:8.0f} targets/s"
                    loads.append(load())
                    print(
                        f"  {name} round {r + 1}: raw {per['raw'][-1]:8.0f} msg/s  crawlherd "
                        f"{per['crawlherd'][-1]:8.0f} targets/s{floor}  (load {loads[-1]:.1f})",
                        flush=True,
                    )
    finally:
        await engine.dispose()
    db = "PostgreSQL" if database_url.startswith("postgres") else "SQLite"
    print(f"\n{n} due targets, median of {rounds} interleaved rounds, load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'path':32} {'crawlherd':>12} {'raw driver':>12} {'ratio':>6}")
    labels = {"amqp": "RabbitMQ (aio-pika, confirms)", "redis": "Redis Streams (XADD pipelined)"}
    for name, per in results.items():
        ours, base = statistics.median(per["crawlherd"]), statistics.median(per["raw"])
        path = f"{db} -> {labels[name]}"
        print(f"{path[:32]:32} {ours:10.0f}/s {base:10.0f}/s {ours / base:6.2f}")
        if per["floor"]:
            floor = statistics.median(per["floor"])
            print(f"{'  same, memory:// broker (floor)':32} {floor:10.0f}/s {base:10.0f}/s {floor / base:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--brokers", nargs="+", choices=["amqp", "redis"], default=["amqp", "redis"])
    parser.add_argument("--targets", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=500, help="publishes outstanding (both sides)")
    parser.add_argument("--publish-concurrency", type=int, default=None, help="crawlherd's (default: --in-flight)")
    parser.add_argument("--batch", type=int, default=1000, help="targets claimed per tick")
    parser.add_argument("--relay-batch", type=int, default=1000, help="outbox rows leased per relay round")
    parser.add_argument("--floor", action="store_true", help="also dispatch to memory:// (the database's share)")
    args = parser.parse_args()
    url = args.database_url
    if url.startswith("postgres"):
        with fresh_postgres_database(url) as scratch:
            asyncio.run(run(args, scratch))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(run(args, f"sqlite:///{url[len('sqlite:///'):] or os.path.join(tmp, 'bench.db')}"))


if __name__ == "__main__":
    main()
