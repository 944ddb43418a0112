"""The ``redis://`` frontier against raw redis-py, in one run, on a private ``redis-server``.

    .venv/bin/python bench/redis_frontier.py [--requests 200000] [--hosts 1000] [--rounds 3]
        [--redis private|redis://host:port/db] [--cluster]

Workload (issue 13's row): ``--requests`` requests over ``--hosts`` hosts, 20% exact duplicates,
priorities 0-100, politeness delay 0. crawlherd: ``enqueue_requests`` in batches of 1,000, then
``next_requests(500)`` + ``ack_many`` until empty. Raw baseline: the same requests as JSON records,
pipelined ``SADD`` (the fingerprint) + ``ZADD`` (the record, scored by priority) in batches of 1,000
(a record is queued when its ``SADD`` said it is new), then ``ZPOPMAX 500`` until empty -- no
politeness, no leases, no expiry.

Each round runs both, interleaved (raw, crawlherd, raw, ...), each on an empty server; the medians are
printed. Beside the client's wall-clock rate: the Redis server's CPU (``INFO cpu`` used_cpu_sys +
used_cpu_user delta) per request, the bytes Redis holds per queued request at the peak (``INFO
memory`` used_memory delta after the enqueue phase, before the drain), and the priority order: the
adjacent pairs within a batch out of order (lower priority first, or a later-enqueued request before an
earlier one of the same priority), summed over the run, the most of any round (goal: 0).

``--cluster``: then the ``redis+cluster://`` frontier on private local clusters (redis-server
--cluster-enabled yes, on free ports): 1 master, 3 masters, and 3 masters with one replica each, without
and with ``wait_replicas=1`` (every write script followed by ``WAIT 1``); the frontier has its default
12 shards (hosts spread over the masters). Each configuration's rounds are interleaved with raw rounds on
the single private Redis, and its ratio is against their median. Server CPU and memory are summed over
the nodes (replicas included); "busiest master" is the CPU of the master that worked most, per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).parent))
from crawlherd.frontier import open_scheduler  # noqa: E402
from crawlherd.request import Request  # noqa: E402
from frontier_backends import start_private_redis, workload  # noqa: E402


async def server_cpu(client: Any) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def used_memory(client: Any) -> int:
    return int((await client.info("memory"))["used_memory"])


async def raw_round(url: str, reqs: list[Request]) -> dict[str, float]:
    client = aioredis.Redis.from_url(url)
    prefix = f"raw{uuid.uuid4().hex[:8]}"
    records = [
        (r.fingerprint, json.dumps(r.to_record(), separators=(",", ":")), float(r.priority)) for r in reqs
    ]
    try:
        await client.flushdb()
        mem0 = await used_memory(client)
        cpu0 = await server_cpu(client)
        t0 = time.perf_counter()
        queued = 0
        for start in range(0, len(records), 1000):
            part = records[start : start + 1000]
            pipe = client.pipeline(transaction=False)
            for fp, _, _ in part:
                pipe.sadd(f"{prefix}:seen", fp)
            new = await pipe.execute()
            pipe = client.pipeline(transaction=False)
            mapping = {rec: prio for (_, rec, prio), n in zip(part, new, strict=True) if n}
            if mapping:
                pipe.zadd(f"{prefix}:queue", mapping)  # type: ignore[arg-type]
                queued += len(mapping)
            await pipe.execute()
        t1 = time.perf_counter()
        peak = await used_memory(client) - mem0
        t1b = time.perf_counter()
        done = 0
        while popped := await client.zpopmax(f"{prefix}:queue", 500):
            done += len(popped)
        t2 = time.perf_counter()
        cpu = await server_cpu(client) - cpu0
        assert done == queued, (done, queued)
        await client.flushdb()
    finally:
        await client.aclose()
    total = (t1 - t0) + (t2 - t1b)
    return {"req_s": len(reqs) / total, "cpu_us": cpu / len(reqs) * 1e6, "bytes": peak / queued, "queued": queued}


class _Nodes:
    """INFO cpu / memory summed over several servers (a cluster's nodes)."""

    def __init__(self, urls: list[str]) -> None:
        self.clients = [aioredis.Redis.from_url(u) for u in urls]

    async def info(self, section: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in self.clients:
            for k, v in (await c.info(section)).items():
                if isinstance(v, int | float):
                    out[k] = out.get(k, 0) + v
        return out

    async def cpu_each(self) -> list[float]:
        """used_cpu_sys + used_cpu_user of each master (replicas are not counted)."""
        out = []
        for c in self.clients:
            if (await c.info("replication"))["role"] == "master":
                out.append(await server_cpu(c))
        return out

    async def flushdb(self) -> None:
        for c in self.clients:
            if (await c.info("replication"))["role"] == "master":
                await c.flushdb()

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()


async def crawlherd_round(
    url: str, reqs: list[Request], admin_urls: list[str] | None = None, query: str = ""
) -> dict[str, float]:
    rank = enqueue_ranks(reqs)  # before the clock starts
    admin: Any = _Nodes(admin_urls) if admin_urls else aioredis.Redis.from_url(url)
    try:
        await admin.flushdb()
        async with open_scheduler(f"{url}?prefix=b{uuid.uuid4().hex[:8]}{query}", delay=0.0) as frontier:
            await frontier.stats()  # the scripts loaded and the layout written before the clock starts
            mem0 = await used_memory(admin)
            cpu0 = await server_cpu(admin)
            each0 = await admin.cpu_each() if admin_urls else [cpu0]
            t0 = time.perf_counter()
            queued = 0
            for start in range(0, len(reqs), 1000):
                queued += await frontier.enqueue_requests(reqs[start : start + 1000])
            t1 = time.perf_counter()
            peak = await used_memory(admin) - mem0
            t1b = time.perf_counter()
            done = 0
            batches = []
            while leases := await frontier.next_requests(500):
                done += len(leases)
                # only their fingerprints are kept (their order is checked after the clock stops): a
                # consumer drops what it acked, and 160k leases held would make every collection of
                # Python's garbage collector walk them -- most of the client's time
                batches.append([lease.request.fingerprint for lease in leases])
                await frontier.ack_many(leases)
            t2 = time.perf_counter()
            cpu = await server_cpu(admin) - cpu0
            each = await admin.cpu_each() if admin_urls else [cpu0 + cpu]
            busiest = max(b - a for a, b in zip(each0, each, strict=True))
            assert done == queued, (done, queued)
        await admin.flushdb()
    finally:
        await admin.aclose()
    total = (t1 - t0) + (t2 - t1b)
    return {
        "req_s": len(reqs) / total,
        "cpu_us": cpu / len(reqs) * 1e6,
        "busiest_us": busiest / len(reqs) * 1e6,
        "bytes": peak / queued,
        "queued": queued,
        "inversions": sum(batch_inversions(b, rank) for b in batches),
    }


def enqueue_ranks(reqs: list[Request]) -> dict[bytes, tuple[int, int]]:
    """The place each request must come out in: (-priority, the order it was first enqueued in)."""
    rank: dict[bytes, tuple[int, int]] = {}
    for r in reqs:
        rank.setdefault(r.fingerprint, (-r.priority, len(rank)))
    return rank


def batch_inversions(fingerprints: list[bytes], rank: dict[bytes, tuple[int, int]]) -> int:
    """Adjacent pairs of one batch out of priority order (or, among equal priorities, out of FIFO order)."""
    ranks = [rank[fp] for fp in fingerprints]
    return sum(1 for a, b in zip(ranks, ranks[1:], strict=False) if b < a)


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--redis", default="private", help="a Redis URL (FLUSHDB'd!), or 'private' (default)")
    p.add_argument("--cluster", action="store_true", help="also on private Redis Clusters (1 and 3 masters)")
    args = p.parse_args()
    server = None
    if args.redis == "private":
        server, args.redis = start_private_redis()
    try:
        reqs = workload(args.requests, args.hosts)
        print(f"workload: {len(reqs):,} requests, {args.hosts:,} hosts, 20% duplicates, delay 0; redis {args.redis}")
        results: dict[str, list[dict[str, float]]] = {"raw redis-py": [], "crawlherd": []}
        for i in range(args.rounds):
            results["raw redis-py"].append(await raw_round(args.redis, reqs))
            results["crawlherd"].append(await crawlherd_round(args.redis, reqs))
            print(
                f"  round {i + 1}: raw {results['raw redis-py'][-1]['req_s']:,.0f} req/s, "
                f"crawlherd {results['crawlherd'][-1]['req_s']:,.0f} req/s"
            )
        med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in results.items()}
        raw = med["raw redis-py"]
        print(f"\nmedians of {args.rounds} interleaved rounds")
        print(
            f"{'':<14} {'req/s':>9} {'ratio':>7} {'Redis CPU µs/req':>17} {'CPU ratio':>10} {'B/queued req':>13} "
            f"{'inversions':>11}"
        )
        for name, m in med.items():
            inv = f"{max(r['inversions'] for r in results[name]):>11,.0f}" if "inversions" in m else f"{'-':>11}"
            print(
                f"{name:<14} {m['req_s']:>9,.0f} {m['req_s'] / raw['req_s']:>6.2f}x {m['cpu_us']:>17.2f} "
                f"{m['cpu_us'] / raw['cpu_us']:>9.2f}x {m['bytes']:>13.0f} {inv}"
            )
        if args.cluster:
            await cluster_bench(args, reqs)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    return 0


async def cluster_bench(args: argparse.Namespace, reqs: list[Request]) -> None:
    """Each cluster configuration, its rounds interleaved with raw rounds on the single private Redis:
    every ratio is against the raw median of the same minutes."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from tests.support.rediscluster import LocalCluster

    print("\nredis+cluster:// (12 shards), each row against raw redis-py rounds interleaved with its own")
    print(
        f"{'':<38} {'req/s':>9} {'raw req/s':>10} {'ratio':>7} {'Redis CPU µs/req':>17} {'busiest master':>15} "
        f"{'B/queued req':>13} {'inversions':>11}"
    )
    configs = [(1, 0, ""), (3, 0, ""), (3, 1, ""), (3, 1, "&wait_replicas=1")]
    for masters, replicas, query in configs:
        with tempfile.TemporaryDirectory() as tmp:
            cluster = LocalCluster(Path(tmp), masters=masters, replicas=replicas).start()
            try:
                nodes = [f"redis://127.0.0.1:{p}/0" for p in cluster.procs]
                rounds, raws = [], []
                for _ in range(args.rounds):
                    raws.append(await raw_round(args.redis, reqs))
                    rounds.append(await crawlherd_round(cluster.url, reqs, nodes, query))
            finally:
                cluster.stop()
        m = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        raw = statistics.median(r["req_s"] for r in raws)
        label = f"{masters} master(s), {replicas} replica(s) each{' WAIT 1' if query else ''}"
        print(
            f"{label:<38} {m['req_s']:>9,.0f} {raw:>10,.0f} {m['req_s'] / raw:>6.2f}x {m['cpu_us']:>17.2f} "
            f"{m['busiest_us']:>15.2f} {m['bytes']:>13.0f} {max(r['inversions'] for r in rounds):>11,.0f}"
        )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
