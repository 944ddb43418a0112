"""Frontier benchmark (no network).

Workload: 200,000 requests across 1,000 hosts, 20% exact duplicates, random priorities 0-100;
enqueue all, then lease and ack until empty (politeness delay 0, leases and per-host caps on).

Measured in the same run, each in its own process so that peak RSS is its own:
- ``lower-bound``: ``heapq`` + a ``set`` of fingerprints of the same canonical URLs (no leases, no hosts);
- ``memory://``: crawlherd's in-memory frontier;
- ``scrapy``: Scrapy's own scheduler (its default priority queue and RFPDupeFilter), when installed.
Also: bytes per fingerprint of the exact filter at 1,000,000 fingerprints.

Usage: python bench/frontier.py [--requests 200000] [--hosts 1000] [--backends memory,...]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import heapq
import itertools
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

DUP_SHARE = 0.2


def workload(n: int, hosts: int, seed: int = 42) -> Iterator[tuple[str, int]]:
    """The requests, generated on the fly (so peak RSS measures the frontier, not the input list).
    Unique URL k is a pure function of k; exactly 20% of the positions repeat an earlier URL."""
    rng = random.Random(seed)
    unique = int(n * (1 - DUP_SHARE))
    dup_positions = set(rng.sample(range(1, n), n - unique))

    def url(k: int) -> tuple[str, int]:
        h = (k * 2654435761) % hosts
        return f"http://host{h}.example/path/{k}?q={k * 31 % 1000}&page={k % 7}", (k * 7919) % 101

    made = 0
    for position in range(n):
        if position in dup_positions and made:
            yield url(rng.randrange(made))
        else:
            yield url(made)
            made += 1


def inversions(priorities: list[int]) -> int:
    return sum(1 for a, b in zip(priorities, priorities[1:], strict=False) if b > a)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_lower_bound(items: Iterator[tuple[str, int]]) -> dict[str, Any]:
    from crawlherd.url import canonicalize_url

    t0 = time.perf_counter()
    seen: set[bytes] = set()
    heap: list[tuple[int, int, str]] = []
    for seq, (url, prio) in enumerate(items):
        canonical = canonicalize_url(url)
        fp = hashlib.blake2b(b"GET " + canonical.encode(), digest_size=8).digest()
        if fp in seen:
            continue
        seen.add(fp)
        heapq.heappush(heap, (-prio, seq, canonical))
    order = []
    while heap:
        order.append(-heapq.heappop(heap)[0])
    return {"seconds": time.perf_counter() - t0, "dequeued": len(order), "inversions": inversions(order)}


async def _run_crawlherd(items: Iterator[tuple[str, int]], url: str, batch: int) -> dict[str, Any]:
    from crawlherd import Request, open_scheduler

    async with open_scheduler(url, delay=0.0) as frontier:
        t0 = time.perf_counter()
        if batch > 1:
            while chunk := list(itertools.islice(items, batch)):
                await frontier.enqueue_requests(Request(u, priority=p) for u, p in chunk)
        else:
            for u, p in items:
                await frontier.enqueue_request(Request(u, priority=p))
        t_enq = time.perf_counter() - t0
        order: list[int] = []
        if batch > 1:
            while leases := await frontier.next_requests(batch):
                order.extend(lease.request.priority for lease in leases)
                await frontier.ack_many(leases)
        else:
            while (lease := await frontier.next_request()) is not None:
                order.append(lease.request.priority)
                await frontier.ack(lease)
        seconds = time.perf_counter() - t0
        stats = await frontier.stats()
    # With batches, a batch may hold several hosts' heads; order within a batch is still best-first.
    return {
        "seconds": seconds,
        "enqueue_seconds": t_enq,
        "dequeued": len(order),
        "inversions": inversions(order),
        "duplicates": stats.duplicates_filtered,
    }


def run_crawlherd(items: Iterator[tuple[str, int]], url: str, batch: int) -> dict[str, Any]:
    return asyncio.run(_run_crawlherd(items, url, batch))


def run_scrapy(items: Iterator[tuple[str, int]]) -> dict[str, Any]:
    from scrapy import Request as ScrapyRequest
    from scrapy import Spider
    from scrapy.core.scheduler import Scheduler
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(Spider, {"LOG_ENABLED": False})
    spider = Spider.from_crawler(crawler, "bench")
    crawler.spider = spider
    # The default priority queue (DownloaderAwarePriorityQueue) asks the engine's downloader for
    # per-slot activity; a real engine is built as a crawl would build it, but never started.
    crawler.engine = crawler._create_engine()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(spider)
    t0 = time.perf_counter()
    for url, prio in items:
        scheduler.enqueue_request(ScrapyRequest(url, priority=prio))
    order = []
    while (req := scheduler.next_request()) is not None:
        order.append(req.priority)
    seconds = time.perf_counter() - t0
    scheduler.close("finished")
    return {"seconds": seconds, "dequeued": len(order), "inversions": inversions(order)}


def fingerprint_bytes(n: int = 1_000_000) -> dict[str, float]:
    from crawlherd.frontier.dupefilter import ExactFilter

    rng = random.Random(1)
    f = ExactFilter()
    for _ in range(n):
        f.add(rng.getrandbits(64) or 1)
    return {"exact_filter_bytes_per_fp": f.nbytes / len(f)}


def child(args: argparse.Namespace) -> None:
    items = workload(args.requests, args.hosts)
    if args.child == "lower-bound":
        result = run_lower_bound(items)
    elif args.child == "scrapy":
        result = run_scrapy(items)
    elif args.child == "fingerprints":
        result = fingerprint_bytes()
    else:
        result = run_crawlherd(items, args.child, args.batch)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--hosts", type=int, default=1_000)
    parser.add_argument("--backends", default="memory://", help="comma-separated frontier URLs")
    parser.add_argument("--batch", type=int, default=1, help="enqueue/lease/ack batch size (1: one at a time)")
    parser.add_argument("--no-scrapy", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    def run(name: str) -> dict[str, Any]:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            name,
            "--requests",
            str(args.requests),
            "--hosts",
            str(args.hosts),
            "--batch",
            str(args.batch),
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return dict(json.loads(out.strip().splitlines()[-1]))

    # Python 3.11 baseline.
    print(
        f"workload: {args.requests:,} requests, {args.hosts:,} hosts, {DUP_SHARE:.0%} duplicates; "
        f"python {sys.version.split()[0]}"
    )
    base = run("lower-bound")
    rows = [("lower bound (heapq + set)", base)]
    for url in args.backends.split(","):
        rows.append((f"crawlherd {url}", run(url)))
    if not args.no_scrapy:
        try:
            rows.append(("scrapy scheduler", run("scrapy")))
        except subprocess.CalledProcessError as exc:
            print(f"scrapy: not measured ({exc.stderr.strip().splitlines()[-1] if exc.stderr else exc})")
    print(f"{'':34} {'seconds':>8} {'req/s':>10} {'peak RSS':>9} {'inversions':>10} {'vs lower bound':>14}")
    for name, r in rows:
        rate = args.requests / r["seconds"]
        ratio = base["seconds"] / r["seconds"]
        print(
            f"{name:34} {r['seconds']:8.2f} {rate:10,.0f} {r['peak_rss_mb']:7.0f}MB {r['inversions']:10d} "
            f"{ratio:13.2f}x"
        )
    scrapy = dict(rows).get("scrapy scheduler")
    if scrapy:
        for name, r in rows[1:-1]:
            print(
                f"{name} vs Scrapy's scheduler: {scrapy['seconds'] / r['seconds']:.1f}x the throughput, "
                f"{scrapy['peak_rss_mb'] / r['peak_rss_mb']:.1f}x less peak RSS"
            )
    fp = run("fingerprints")
    print(
        f"exact filter at 1,000,000 fingerprints: {fp['exact_filter_bytes_per_fp']:.1f} B/fingerprint "
        "(Scrapy's set of hex SHA1 strings: ~123 B)"
    )


if __name__ == "__main__":
    main()
