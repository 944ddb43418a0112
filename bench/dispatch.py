"""Benchmark: ``crawlherd dispatch --once`` against the honest bound, in the same run.

For each broker, each round runs the **bound** and then **crawlherd**, interleaved (bound, crawlherd,
bound, crawlherd, ...), each as a process of its own timed from its start to its exit, on the same
``--targets`` due targets (each with one due slot) in a scratch PostgreSQL database (created next to
``--database-url``, dropped afterwards; the targets are written and ``VACUUM ANALYZE``-d before the
clock starts); the medians of the rounds are printed with their ratio:

- **bound**: ``bench/dispatch_bound.py``, the raw drivers (asyncpg, aio-pika / redis-py) doing the
  same transactional work plainly: claim and advance the due targets (``UPDATE ... FOR UPDATE SKIP
  LOCKED ... RETURNING``, 5,000 a batch), write the outbox rows (``unnest``), publish them (RabbitMQ:
  confirms, 500 in flight; Redis: ``XADD`` pipelined 500 per round trip), delete the sent rows.
- **crawlherd**: ``python -m crawlherd dispatch --once --database-url ... --broker-url ...`` with its
  defaults, on a scratch queue / key prefix.

Each side's CPU time (user + system, the process's own: ``RUSAGE_CHILDREN``) is printed too, and
its ratio (bound's CPU / crawlherd's): steadier than the rates when the machine is shared.
Both sides' messages are counted in their queue / stream afterwards (the run fails unless each holds
exactly ``--targets``). For reference, each round also times the **publish only** figure: the raw
driver publishing as many of crawlherd's job bodies in this process (no database; no outbox can
reach it): aio-pika with confirms, or redis-py ``XADD``, ``--in-flight`` (500) at a time.

    .venv/bin/python bench/dispatch.py --database-url postgresql://postgres@127.0.0.1:5432/test \\
        --amqp-url amqp://guest:guest@127.0.0.1:5672/ --redis-url redis://127.0.0.1:6379/0 \\
        --targets 30000 --rounds 3

crawlherd's modules are byte-compiled first, as an installed package's are. Every queue and key is a
scratch one, removed afterwards. ``--brokers amqp`` / ``redis`` runs one only.
``--base-src DIR`` adds crawlherd from another tree's ``src`` (e.g. a worktree of main) to each round,
after this tree's: before and after in the same run.
``--floor`` adds, to each round, crawlherd in this process dispatching to the in-process ``memory://``
broker (a publish costs next to nothing): the database's and crawlherd's own share.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aio_pika  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from sqlalchemy import delete, select, text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402
from tests.support.db import add_targets, add_website, fresh_postgres_database  # noqa: E402

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


# -- the processes -------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


#: CPU seconds (user + system) of the last process :func:`timed_process` ran.
CPU: list[float] = [0.0]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def timed_process(*argv: str, src: Path = ROOT / "src") -> tuple[float, str]:
    """Run ``argv`` (with ``src``, default this tree's, first on the path); seconds from start to exit, its stdout.
    Its CPU seconds go to :data:`CPU` (one process at a time: the children's usage grows by its own)."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    elapsed = time.perf_counter() - t0
    CPU[0] = children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} exited with {proc.returncode}")
    return elapsed, out.decode()


def with_option(url: str, name: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{name}={value}"


async def bound_process(database_url: str, broker_url: str, name: str, n: int) -> float:
    """``bench/dispatch_bound.py`` to queue / stream ``name``; checks it published ``n``."""
    elapsed, out = await timed_process(
        sys.executable, str(ROOT / "bench" / "dispatch_bound.py"),
        "--database-url", database_url, "--broker-url", broker_url, "--queue", name,
    )
    assert int(out.split()[-1]) == n, (out, n)
    return elapsed


async def crawlherd_process(database_url: str, broker_url: str, n: int, src: Path) -> float:
    """``crawlherd dispatch --once`` (of the tree ``src``) as a process; checks it says it published ``n``."""
    elapsed, out = await timed_process(
        sys.executable, "-m", "crawlherd", "dispatch", "--once", "--json",
        "--database-url", database_url, "--broker-url", broker_url, src=src,
    )
    data = json.loads(out[out.index("{") :])
    assert data["jobs"] == data["published"] == n and data["failed"] == 0, (data, n)
    return elapsed


async def count_and_remove(broker_url: str, name: str, *, crawlherd: bool) -> int:
    """How many messages queue / stream ``name`` holds; then it (and crawlherd's dead queue) goes."""
    if broker_url.startswith("amqp"):
        connection = await aio_pika.connect(broker_url)
        try:
            channel = await connection.channel()
            queue = await channel.declare_queue(name, passive=True)
            count = queue.declaration_result.message_count
            await channel.queue_delete(name)
            if crawlherd:
                await channel.queue_delete(f"{name}.dead")
                await channel.exchange_delete(f"{name}.dlx")
        finally:
            await connection.close()
        return int(count)
    client = aioredis.from_url(broker_url)
    try:
        stream = f"{name}:jobs" if crawlherd else name
        count = await client.xlen(stream)
        keys = [key async for key in client.scan_iter(match=f"{name}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
    return int(count)


async def bound_round(engine: AsyncEngine, database_url: str, broker_url: str, site: int, n: int) -> float:
    await make_due(engine, site, n)
    name = f"bench.bound.{uuid.uuid4().hex[:10]}"
    elapsed = await bound_process(database_url, broker_url, name, n)
    assert (got := await count_and_remove(broker_url, name, crawlherd=False)) == n, (got, n)
    return n / elapsed


async def crawlherd_round(
    engine: AsyncEngine, database_url: str, broker_url: str, site: int, n: int, src: Path = ROOT / "src"
) -> float:
    await make_due(engine, site, n)
    name = f"bench{uuid.uuid4().hex[:10]}"
    option = "queue" if broker_url.startswith("amqp") else "prefix"
    elapsed = await crawlherd_process(database_url, with_option(broker_url, option, name), n, src)
    assert (got := await count_and_remove(broker_url, name, crawlherd=True)) == n, (got, n)
    return n / elapsed


# -- the run --------------------------------------------------------------------------------------

Timed = Callable[[], Coroutine[Any, Any, float]]


async def run(args: argparse.Namespace, database_url: str) -> None:
    n, rounds = args.targets, args.rounds
    engine = create_engine(database_url, pool_size=2)
    brokers = {"amqp": args.amqp_url, "redis": args.redis_url}
    results: dict[str, dict[str, list[float]]] = {}
    loads: list[float] = [load()]
    try:
        await upgrade(engine)
        site = await add_website(engine, name=f"bench-{uuid.uuid4().hex[:6]}")
        await make_due(engine, site, min(n, 1000))
        async with open_broker("memory://") as memory:  # warm-up; also gives real bodies
            await crawlherd_once(engine, memory, min(n, 1000), {})
        bodies = await sample_bodies(engine, n)
        for name in args.brokers:
            url = brokers[name]
            raw: Timed
            if name == "amqp":
                raw = lambda url=url: raw_amqp(url, bodies, args.in_flight)  # noqa: E731
            else:
                raw = lambda url=url: raw_redis(url, bodies, args.in_flight)  # noqa: E731
            per = results[name] = {"bound": [], "crawlherd": [], "raw": [], "floor": [], "bound_cpu": [],
                                   "crawlherd_cpu": [], "base": [], "base_cpu": []}
            for r in range(rounds):
                per["bound"].append(await bound_round(engine, database_url, url, site, n))
                per["bound_cpu"].append(CPU[0])
                per["crawlherd"].append(await crawlherd_round(engine, database_url, url, site, n))
                per["crawlherd_cpu"].append(CPU[0])
                base = ""
                if args.base_src:
                    per["base"].append(await crawlherd_round(engine, database_url, url, site, n, args.base_src))
                    per["base_cpu"].append(CPU[0])
                    ratio = per["base"][-1] / per["bound"][-1]
                    base = f"  base {per['base'][-1]:8.0f}/s ({ratio:.2f}, CPU {CPU[0]:.2f} s)"
                per["raw"].append(n / await raw())
                floor = ""
                if args.floor:
                    await make_due(engine, site, n)
                    async with open_broker("memory://") as memory:
                        per["floor"].append(n / await crawlherd_once(engine, memory, n, {}))
                    floor = f"  memory:// {per['floor'][-1]:8.0f}/s"
                loads.append(load())
                print(
                    f"  {name} round {r + 1}: bound {per['bound'][-1]:8.0f}/s  crawlherd {per['crawlherd'][-1]:8.0f}/s"
                    f"  ({per['crawlherd'][-1] / per['bound'][-1]:.2f})  publish only {per['raw'][-1]:8.0f}/s"
                    f"{floor}{base}  CPU bound {per['bound_cpu'][-1]:.2f} s crawlherd {per['crawlherd_cpu'][-1]:.2f} s"
                    f"  (load {loads[-1]:.1f})",
                    flush=True,
                )
    finally:
        await engine.dispose()
    print(f"\n{n} due targets, median of {rounds} interleaved rounds, load average {min(loads):.1f}-{max(loads):.1f}")
    # ratio: of the medians; per round: the median of each round's own ratio (its two runs are
    # neighbours in time -- steadier when the shared machine's load moves during the run)
    print(f"{'path':34} {'crawlherd':>10} {'bound':>10} {'ratio':>6} {'per round':>9} {'publish only':>13}"
          f" {'CPU crawlherd':>13} {'bound':>7} {'ratio':>6}")
    labels = {"amqp": "PostgreSQL -> RabbitMQ", "redis": "PostgreSQL -> Redis Streams"}
    for name, per in results.items():
        ours, bound = statistics.median(per["crawlherd"]), statistics.median(per["bound"])
        paired = statistics.median(c / b for c, b in zip(per["crawlherd"], per["bound"], strict=True))
        raw_rate = statistics.median(per["raw"])
        cpu_ours, cpu_bound = statistics.median(per["crawlherd_cpu"]), statistics.median(per["bound_cpu"])
        print(f"{labels[name]:34} {ours:8.0f}/s {bound:8.0f}/s {ours / bound:6.2f} {paired:9.2f} {raw_rate:11.0f}/s"
              f" {cpu_ours:11.2f} s {cpu_bound:5.2f} s {cpu_bound / cpu_ours:6.2f}")
        if per["base"]:
            base_rate, base_cpu = statistics.median(per["base"]), statistics.median(per["base_cpu"])
            paired = statistics.median(c / b for c, b in zip(per["base"], per["bound"], strict=True))
            print(f"{'  --base-src':34} {base_rate:8.0f}/s {bound:8.0f}/s {base_rate / bound:6.2f} {paired:9.2f}"
                  f" {'':13} {base_cpu:11.2f} s {cpu_bound:5.2f} s {cpu_bound / base_cpu:6.2f}")
        if per["floor"]:
            floor = statistics.median(per["floor"])
            print(f"{'  in-process, memory:// (floor)':34} {floor:8.0f}/s {bound:8.0f}/s {floor / bound:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="a PostgreSQL server (a scratch database is made on it)")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--brokers", nargs="+", choices=["amqp", "redis"], default=["amqp", "redis"])
    parser.add_argument("--targets", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=500, help="the publish-only figure's publishes outstanding")
    parser.add_argument("--floor", action="store_true", help="also dispatch to memory:// in process")
    parser.add_argument("--base-src", type=Path, default=None,
                        help="also run crawlherd from this src directory (e.g. a worktree of main), after each "
                        "round's crawlherd: before and after in one run")
    args = parser.parse_args()
    # crawlherd's modules as installed: compiled once (this machine's PYTHONDONTWRITEBYTECODE would
    # otherwise have every ``crawlherd`` process compile them from source).
    for src in (ROOT / "src", args.base_src):
        if src is not None:
            compileall.compile_dir(src, quiet=1)
    with fresh_postgres_database(args.database_url) as scratch:
        asyncio.run(run(args, scratch))


if __name__ == "__main__":
    main()
