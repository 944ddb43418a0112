"""Broker throughput: publish N messages (each confirmed before the next, as the relay does), then
consume and ack all N (prefetch 100), for every broker, against a baseline measured in the same run:

- memory://  vs an asyncio.Queue put/get loop;
- sqlite://  vs a raw sqlite3 loop (INSERT autocommit per message; SELECT 100 + DELETE per message),
              same file settings (WAL; synchronous=FULL for inserts, NORMAL for deletes, as the broker);
- redis://   vs a raw redis-py loop: XADD; XREADGROUP COUNT 100 + XACK per message;
- amqp://    vs raw aio-pika: publish with publisher confirms; consume with qos 100 + ack per message.

Usage: ``python bench/brokers.py [-n 20000] [--only sqlite,redis,amqp] [--concurrency 1] [--rounds 3]``;
each round runs the baseline then the broker; the table shows the median rate of the rounds (the
machine is shared: medians of interleaved runs are steadier than one run).
``--concurrency C`` publishes with C publishes in flight (as the relay's ``publish_concurrency``), for
the brokers and the Redis/RabbitMQ/memory baselines alike (the raw sqlite3 loop stays sequential).
Needs the Redis and RabbitMQ of the machine (``CRAWLHERD_TEST_REDIS_URL`` / ``CRAWLHERD_TEST_AMQP_URL``
override the addresses);
everything it creates has a unique name and is deleted afterwards. Prints messages/s and the ratio
broker / baseline (1.0 = as fast as the raw driver loop).

``--cluster``: instead, the ``redis+cluster://`` broker on private local Redis Clusters (redis-server
--cluster-enabled yes on free ports, started and stopped by the benchmark) of 1 and 3 masters, publishing
as the relay does: ``publish_many`` in batches of ``--batch`` (500), against raw redis-py's
``RedisCluster``: the same messages ``XADD``-ed through a cluster pipeline of ``--batch`` (non-transactional),
each round raw then crawlherd on the same cluster. One queue is one slot, so one master; the "3 queues"
row publishes to three queues at once (one broker each; their names hash to the three masters) against
three raw streams likewise. Besides messages/s: the client's CPU per message (``time.process_time``) and
the Redis masters' (``INFO cpu`` used_cpu_sys + used_cpu_user delta, summed). A first row, for
reference, does the same on the machine's one Redis (``redis://``, redis-py's plain client; its server
CPU is not shown: that Redis is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.real_brokers import delete_queues  # noqa: E402

from crawlherd.brokers import open_broker  # noqa: E402

REDIS_URL = os.environ.get("CRAWLHERD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("CRAWLHERD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

PAYLOAD = json.dumps({
    "schema_version": 1, "job_id": "0" * 32, "target_id": 123, "slot_at": "2026-11-21T15:00:00+00:00",
    "website_id": 7, "website_name": "example jobs", "search_url": "https://jobs.example/search?q=python&l=berlin",
    "requires_playwright": False, "pagination_type": "next_link", "keywords_used": "python",
    "location_used": "berlin", "attempt_count": 0,
}).encode()

Timing = tuple[float, float]  # (publish seconds, consume+ack seconds)
CONCURRENCY = 1


async def publish_all(n: int, one: Callable[[int], Awaitable[object]]) -> None:
    """``one(i)`` for i < n, with CONCURRENCY of them in flight."""
    if CONCURRENCY <= 1:
        for i in range(n):
            await one(i)
        return
    sem = asyncio.Semaphore(CONCURRENCY)

    async def guarded(i: int) -> None:
        async with sem:
            await one(i)

    async with asyncio.TaskGroup() as tg:
        for i in range(n):
            tg.create_task(guarded(i))


async def crawlherd_broker(url: str, n: int, **options: object) -> Timing:
    async with open_broker(url, **options) as broker:
        t0 = time.perf_counter()
        await publish_all(n, lambda i: broker.publish(PAYLOAD, key=f"{i}:2026-11-21T15:00:00+00:00"))
        t1 = time.perf_counter()
        got = 0
        async for d in broker.consume(prefetch=100):
            await broker.ack(d)
            got += 1
            if got == n:
                break
        t2 = time.perf_counter()
        assert await broker.pending() == 0
        await delete_queues(broker)
    return t1 - t0, t2 - t1


async def baseline_memory(n: int) -> Timing:
    q: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
    t0 = time.perf_counter()
    await publish_all(n, lambda i: q.put((f"{i}", PAYLOAD)))
    t1 = time.perf_counter()
    for _ in range(n):
        await q.get()
        q.task_done()
    return t1 - t0, time.perf_counter() - t1


async def baseline_sqlite(path: Path, n: int) -> Timing:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, k TEXT, body BLOB)")
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute("INSERT INTO q (k, body) VALUES (?, ?)", (f"{i}", PAYLOAD))
    t1 = time.perf_counter()
    conn.execute("PRAGMA synchronous = NORMAL")  # the broker's policy for settlements, too
    done = 0
    while done < n:
        rows = conn.execute("SELECT id, k, body FROM q ORDER BY id LIMIT 100").fetchall()
        for row in rows:
            conn.execute("DELETE FROM q WHERE id = ?", (row[0],))
            done += 1
    t2 = time.perf_counter()
    conn.close()
    return t1 - t0, t2 - t1


async def baseline_redis(n: int) -> Timing:
    import redis.asyncio as aioredis

    stream, group = f"bench-{uuid.uuid4().hex[:8]}:raw", "g"
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
        t0 = time.perf_counter()
        await publish_all(n, lambda i: client.xadd(stream, {"k": f"{i}", "b": PAYLOAD}))
        t1 = time.perf_counter()
        done = 0
        while done < n:
            res = await client.xreadgroup(group, "c1", {stream: ">"}, count=100, block=1000)
            for eid, _fields in res[0][1]:
                await client.xack(stream, group, eid)
                done += 1
        t2 = time.perf_counter()
    finally:
        await client.delete(stream)
        await client.aclose()
    return t1 - t0, t2 - t1


async def baseline_amqp(n: int) -> Timing:
    import aio_pika

    name = f"bench-{uuid.uuid4().hex[:8]}.raw"
    conn = await aio_pika.connect(AMQP_URL)
    try:
        ch = await conn.channel(publisher_confirms=True)
        queue = await ch.declare_queue(name, durable=True)
        t0 = time.perf_counter()
        await publish_all(n, lambda i: ch.default_exchange.publish(
            aio_pika.Message(PAYLOAD, message_id=f"{i}", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=name))
        t1 = time.perf_counter()
        await ch.set_qos(prefetch_count=100)
        done = 0
        async with queue.iterator() as it:
            async for message in it:
                await message.ack()
                done += 1
                if done == n:
                    break
        t2 = time.perf_counter()
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await conn.close()
    return t1 - t0, t2 - t1


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


# -- redis+cluster:// ---------------------------------------------------------------------------------

ClusterTiming = tuple[float, float, float]  # (wall seconds, client CPU seconds, masters' CPU seconds)


async def masters_cpu(ports: list[int]) -> float:
    """used_cpu_sys + used_cpu_user summed over the servers on ``ports``."""
    import redis.asyncio as aioredis

    total = 0.0
    for port in ports:
        client = aioredis.Redis(port=port)
        try:
            info = await client.info("cpu")
            total += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        finally:
            await client.aclose()
    return total


async def timed(ports: list[int], work: Callable[[], Awaitable[object]]) -> ClusterTiming:
    s0 = await masters_cpu(ports)
    t0, c0 = time.perf_counter(), time.process_time()
    await work()
    t1, c1 = time.perf_counter(), time.process_time()
    return t1 - t0, c1 - c0, await masters_cpu(ports) - s0


def cluster_messages(n: int) -> list[tuple[bytes, str, None]]:
    return [(PAYLOAD, f"{i}:2026-11-21T15:00:00+00:00", None) for i in range(n)]


async def raw_cluster_publish(url: str, ports: list[int], queues: list[str], n: int, batch: int) -> ClusterTiming:
    """redis-py's RedisCluster (no ``ports``: its plain Redis client on ``url``): each queue's n messages
    XADD-ed ``batch`` per pipeline, the queues at once."""
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    client: aioredis.Redis | RedisCluster
    if ports:
        client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports])
        await client.initialize()
    else:
        client = aioredis.Redis.from_url(url)
    messages = cluster_messages(n)
    streams = [f"{{{q}:raw}}" if ports else f"{q}:raw" for q in queues]

    async def one(stream: str) -> None:
        for start in range(0, n, batch):
            async with client.pipeline(transaction=False) as pipe:
                for body, key, _ in messages[start:start + batch]:
                    pipe.xadd(stream, {"k": key, "b": body})
                await pipe.execute()

    async def work() -> None:
        await asyncio.gather(*(one(s) for s in streams))

    try:
        return await timed(ports, work)
    finally:
        for stream in streams:
            await client.delete(stream)
        await client.aclose()


async def crawlherd_cluster_publish(url: str, ports: list[int], queues: list[str], n: int,
                                    batch: int) -> ClusterTiming:
    """crawlherd's broker: ``publish_many`` of ``batch`` messages at a time, one broker per queue, at once."""
    from crawlherd.brokers.redis import RedisBroker

    brokers = [RedisBroker.from_url(f"{url.split('?', 1)[0]}?prefix={q}") for q in queues]
    for b in brokers:
        await b.__aenter__()
    messages = cluster_messages(n)

    async def one(broker: RedisBroker) -> None:
        for start in range(0, n, batch):
            errors = await broker.publish_many(messages[start:start + batch])
            assert not any(errors), errors

    async def work() -> None:
        await asyncio.gather(*(one(b) for b in brokers))

    try:
        return await timed(ports, work)
    finally:
        for b in brokers:
            assert await b.pending() == n
            await b.client.delete(b.stream, b.dead_stream)
            await b.close()


def spread_names(tag: str, count: int) -> list[str]:
    """``count`` queue names whose keys hash into ``count`` equal slot ranges (the masters' shares)."""
    from redis.crc import key_slot

    names: dict[int, str] = {}
    i = 0
    while len(names) < count:
        name = f"bench-{tag}-{i}"
        names.setdefault(key_slot(f"{name}:jobs".encode()) * count // 16384, name)
        i += 1
    return [names[k] for k in sorted(names)]


async def cluster_main(args: argparse.Namespace) -> None:
    from tests.support.rediscluster import LocalCluster

    n, batch = args.n, args.batch
    print(f"redis+cluster:// broker, {n} messages per queue, publish_many / pipelined XADD of {batch}; "
          f"median of {args.rounds} interleaved rounds (raw, crawlherd, raw, ...)")
    header = (f"{'cluster':26} {'raw msg/s':>10} {'crawlherd':>10} {'ratio':>6} {'client µs/msg raw':>18} "
              f"{'crawlherd':>10} {'Redis µs/msg raw':>17} {'crawlherd':>10}")
    print(header)
    print("-" * len(header))
    # for reference: one Redis (the machine's, shared: its CPU is not ours alone, so not shown), plain client
    names = [f"bench-{uuid.uuid4().hex[:8]}"]
    single = []
    for _ in range(args.rounds):
        single.append((await raw_cluster_publish(REDIS_URL, [], names, n, batch),
                       await crawlherd_cluster_publish(REDIS_URL, [], names, n, batch)))
    print_cluster_row("redis:// (one, shared)", n, single)
    for masters, queues in ((1, 1), (3, 1), (3, 3)):
        with tempfile.TemporaryDirectory() as tmp:
            cluster = LocalCluster(Path(tmp), masters=masters).start()
            try:
                ports = list(cluster.procs)
                names = spread_names(uuid.uuid4().hex[:8], queues)
                runs: list[tuple[ClusterTiming, ClusterTiming]] = []
                for _ in range(args.rounds):
                    raw = await raw_cluster_publish(cluster.url, ports, names, n, batch)
                    ours = await crawlherd_cluster_publish(cluster.url, ports, names, n, batch)
                    runs.append((raw, ours))
            finally:
                cluster.stop()
        print_cluster_row(f"{masters} master(s), {queues} queue(s)", n * queues, runs)


def print_cluster_row(label: str, total: int, runs: list[tuple[ClusterTiming, ClusterTiming]]) -> None:
    """Medians of the rounds: rates, and client and Redis CPU per message, raw then crawlherd."""
    rate = [statistics.median(total / r[side][0] for r in runs) for side in (0, 1)]
    client = [statistics.median(r[side][1] for r in runs) / total * 1e6 for side in (0, 1)]
    server = [statistics.median(r[side][2] for r in runs) / total * 1e6 for side in (0, 1)]
    cpu = f"{server[0]:17.2f} {server[1]:10.2f}" if server[0] else f"{'-':>17} {'-':>10}"
    print(f"{label:26} {rate[0]:10.0f} {rate[1]:10.0f} {rate[1] / rate[0]:6.2f} {client[0]:18.1f} "
          f"{client[1]:10.1f} {cpu}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20_000, help="messages per broker (default 20000)")
    parser.add_argument("--only", default="memory,sqlite,redis,amqp", help="comma-separated brokers")
    parser.add_argument("--concurrency", type=int, default=1, help="publishes in flight (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="baseline/broker rounds; medians shown (default 3)")
    parser.add_argument("--cluster", action="store_true", help="the redis+cluster:// rows instead (see above)")
    parser.add_argument("--batch", type=int, default=500, help="--cluster: messages per publish_many (500)")
    args = parser.parse_args()
    if args.cluster:
        await cluster_main(args)
        return
    global CONCURRENCY
    CONCURRENCY = args.concurrency
    n = args.n
    tag = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as tmp:
        cases: dict[str, tuple[Callable[[], Awaitable[Timing]], Callable[[], Awaitable[Timing]]]] = {
            "memory": (lambda: crawlherd_broker("memory://", n), lambda: baseline_memory(n)),
            "sqlite": (lambda: crawlherd_broker(f"sqlite:///{tmp}/broker-{uuid.uuid4().hex}.db", n,
                                                poll_interval=0.01),
                       lambda: baseline_sqlite(Path(tmp) / f"raw-{uuid.uuid4().hex}.db", n)),
            "redis": (lambda: crawlherd_broker(f"{REDIS_URL}?prefix=bench-{tag}", n), lambda: baseline_redis(n)),
            "amqp": (lambda: crawlherd_broker(f"{AMQP_URL}?queue=bench-{tag}", n), lambda: baseline_amqp(n)),
        }
        print(f"{n} messages per broker, {CONCURRENCY} publish(es) in flight, median of {args.rounds} rounds; "
              "rates in messages/s; ratio = crawlherd / raw baseline (same run)")
        header = f"{'broker':8} {'publish':>9} {'raw pub':>9} {'ratio':>6} {'consume':>9} {'raw cons':>9} {'ratio':>6}"
        print(header)
        print("-" * len(header))
        for name in args.only.split(","):
            ours_fn, base_fn = cases[name]
            runs: list[tuple[Timing, Timing]] = []
            for _ in range(args.rounds):
                base = await base_fn()
                ours = await ours_fn()
                runs.append((ours, base))
            pub = statistics.median(rate(n, o[0]) for o, _ in runs)
            raw_pub = statistics.median(rate(n, b[0]) for _, b in runs)
            con = statistics.median(rate(n, o[1]) for o, _ in runs)
            raw_con = statistics.median(rate(n, b[1]) for _, b in runs)
            print(f"{name:8} {pub:9.0f} {raw_pub:9.0f} {pub / raw_pub:6.2f} {con:9.0f} {raw_con:9.0f} "
                  f"{con / raw_con:6.2f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
