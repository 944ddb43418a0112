"""Durable frontiers against the memory baseline, in one run, on loopback.

    .venv/bin/python bench/frontier_backends.py [--requests 200000] [--hosts 1000]
        [--fingerprints 1000000] [--redis private|redis://host:port/db] [--backends memory,sqlite,redis]

Workload (the frontier issue's): ``--requests`` requests across ``--hosts`` hosts, 20% of them exact
duplicates of earlier ones, random priorities 0-100; enqueue them all (``enqueue_requests`` in
batches of 1,000), then lease + ack until empty (``next_requests(500)`` + ``ack_many``), politeness
delay 0. Request objects are built before the clock starts (the same list for every backend).

Then, for Redis, the bytes each fingerprint costs at ``--fingerprints`` fingerprints (``MEMORY
USAGE`` of the duplicate-filter keys, exact and Bloom), filled through the frontier in rounds of
enqueue + drain so that the queue stays small; and the bytes per queued request at the workload's
peak. scrapy-redis, for comparison: ~88 B per fingerprint (a set of 40-char hex SHA1 strings) and
~350 B per queued request (pickled request in a sorted set).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.request import Request

SCRAPY_REDIS_FP_BYTES = 88
SCRAPY_REDIS_REQUEST_BYTES = 350


def workload(n: int, hosts: int, seed: int = 7) -> list[Request]:
    rng = random.Random(seed)
    unique = int(n * 0.8)
    reqs = [
        Request(
            f"http://host{rng.randrange(hosts)}.test/page/{i}?q={rng.randrange(10**6)}", priority=rng.randint(0, 100)
        )
        for i in range(unique)
    ]
    dups = [reqs[rng.randrange(unique)] for _ in range(n - unique)]
    out = reqs + dups
    rng.shuffle(out)  # whichever copy comes first is queued, the other refused
    return out


async def run_workload(frontier: Frontier, reqs: list[Request]) -> dict[str, float]:
    t0 = time.perf_counter()
    queued = 0
    for start in range(0, len(reqs), 1000):
        queued += await frontier.enqueue_requests(reqs[start : start + 1000])
    t1 = time.perf_counter()
    done = 0
    while leases := await frontier.next_requests(500):
        done += len(leases)
        await frontier.ack_many(leases)
    t2 = time.perf_counter()
    assert done == queued, (done, queued)
    assert await frontier.idle()
    return {"queued": queued, "enqueue_s": t1 - t0, "drain_s": t2 - t1, "total_s": t2 - t0}


async def lua_usec(url: str) -> int:
    """Microseconds Redis spent in EVALSHA so far (INFO commandstats; server-wide)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_evalsha", {}).get("usec", 0))


async def redis_memory(url: str, fingerprints: int, dupefilter: str) -> dict[str, float]:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    opts: dict[str, Any] = {"dupefilter": dupefilter, "capacity": fingerprints, "max_in_flight": 10**6}
    async with open_scheduler(f"{url}?prefix={prefix}", **opts) as f:
        try:
            n = 0
            chunk = 50_000
            peak_queue = 0
            while n < fingerprints:
                k = min(chunk, fingerprints - n)
                reqs = [Request(f"http://fp{(n + i) % 1000}.test/{n + i}") for i in range(k)]
                for start in range(0, k, 1000):
                    await f.enqueue_requests(reqs[start : start + 1000])
                if n == 0:
                    used = await f.memory_usage()  # type: ignore[attr-defined]
                    peak_queue = used["queue"]
                while leases := await f.next_requests(1000):
                    await f.ack_many(leases)
                n += k
            used = await f.memory_usage()  # type: ignore[attr-defined]
            stats = await f.stats()
            return {
                "fingerprints": stats.enqueued,
                "dupefilter_bytes": used["dupefilter"],
                "per_fp": used["dupefilter"] / stats.enqueued,
                "queue_bytes_per_request": peak_queue / chunk,
            }
        finally:
            await f.purge()  # type: ignore[attr-defined]


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--fingerprints", type=int, default=1_000_000)
    p.add_argument(
        "--redis",
        default="private",
        help="Redis URL, or 'private' (default): a redis-server of the benchmark's own on a free port, so that "
        "its script time (INFO commandstats) is ours alone",
    )
    p.add_argument("--backends", default="memory,sqlite,redis")
    args = p.parse_args()
    backends = args.backends.split(",")

    server = None
    if args.redis == "private" and "redis" in backends:
        server, args.redis = start_private_redis()
    try:
        return await bench(args, backends)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


def start_private_redis() -> tuple[subprocess.Popen[bytes], str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server not found: pass --redis redis://host:port/db")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                break
        except OSError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0"


async def bench(args: argparse.Namespace, backends: list[str]) -> int:
    reqs = workload(args.requests, args.hosts)
    print(f"workload: {len(reqs):,} requests, {args.hosts:,} hosts, 20% duplicates, priorities 0-100")
    if "redis" in backends:
        print(f"redis: {args.redis}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in backends:
            if name == "memory":
                url = "memory://"
            elif name == "sqlite":
                url = f"sqlite:///{Path(tmp) / 'bench.db'}"
            else:
                url = f"{args.redis}?prefix=bench{uuid.uuid4().hex[:8]}"
            async with open_scheduler(url, delay=0.0) as frontier:
                try:
                    lua0 = await lua_usec(args.redis) if name == "redis" else 0
                    cpu0 = time.process_time()
                    results[name] = await run_workload(frontier, reqs)
                    results[name]["cpu_s"] = time.process_time() - cpu0
                    if name == "redis":
                        results[name]["lua_s"] = (await lua_usec(args.redis) - lua0) / 1e6
                finally:
                    if name == "redis":
                        await frontier.purge()  # type: ignore[attr-defined]

    base = results.get("memory")
    print("(wall-clock rates; the machine is shared, so also this process's CPU time and Redis's script time)")
    print(f"\n{'backend':<8} {'queued':>8} {'enqueue/s':>11} {'lease+ack/s':>12} {'total req/s':>12} {'vs memory':>10}")
    for name, r in results.items():
        total = len(reqs) / r["total_s"]
        ratio = f"{(base['total_s'] / r['total_s']):.3f}x" if base else "-"
        print(
            f"{name:<8} {int(r['queued']):>8,} {len(reqs) / r['enqueue_s']:>11,.0f} "
            f"{r['queued'] / r['drain_s']:>12,.0f} {total:>12,.0f} {ratio:>10}"
        )
    for name, r in results.items():
        extra = f", Redis Lua {r['lua_s']:.2f} s" if "lua_s" in r else ""
        print(f"  {name}: client CPU {r['cpu_s']:.2f} s{extra} for {len(reqs):,} requests")

    if "redis" in backends and args.fingerprints:
        print(f"\nRedis memory at {args.fingerprints:,} fingerprints (MEMORY USAGE of the keys):")
        for kind in ("exact", "bloom"):
            m = await redis_memory(args.redis, args.fingerprints, kind)
            print(
                f"  {kind:<6} filter: {m['dupefilter_bytes']:>12,.0f} B = {m['per_fp']:.2f} B/fingerprint "
                f"(scrapy-redis ~{SCRAPY_REDIS_FP_BYTES} B: {SCRAPY_REDIS_FP_BYTES / m['per_fp']:.1f}x smaller)"
            )
        print(
            f"  queue: {m['queue_bytes_per_request']:.0f} B per queued request "
            f"(scrapy-redis ~{SCRAPY_REDIS_REQUEST_BYTES} B)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
