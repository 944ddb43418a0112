"""A small crawl worker for the durable-frontier tests (the engine's Crawler is not used on purpose:
these tests are about the frontier).

``python frontier_worker.py --frontier URL [--concurrency N] [--name W] [--delay S] [--lease-timeout S]``

Leases from the frontier, fetches with aiohttp, enqueues the page's links, acks. Every frontier call
is retried with exponential backoff on BackendUnavailableError (Redis restarting). Exits 0 when the
frontier is idle (nothing queued, nothing in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import aiohttp

from crawlherd.errors import BackendUnavailableError, LeaseError
from crawlherd.frontier import Frontier, Lease, open_scheduler
from crawlherd.request import Request

T = TypeVar("T")
LINK = re.compile(r'href="([^"]+)"')
log = logging.getLogger("frontier_worker")


async def persist(op: Callable[[], Awaitable[T]]) -> T:
    """``op()``, retried with exponential backoff while the backend is unavailable."""
    pause = 0.05
    while True:
        try:
            return await op()
        except BackendUnavailableError as exc:
            log.warning("frontier unavailable (%s); retrying in %.2fs", exc, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)


async def settle(frontier: Frontier, lease: Lease) -> None:
    try:
        await persist(partial(frontier.ack, lease))
    except LeaseError:
        # A retried ack whose first try went through, or a lease that expired meanwhile.
        log.info("ack of %s: lease already settled or expired", lease.request.url)


async def fetch_loop(frontier: Frontier, session: aiohttp.ClientSession, name: str) -> None:
    while True:
        lease = await persist(lambda: frontier.wait_next())
        if lease is None:
            return
        req = lease.request
        leased_at = lease.expires_at - frontier.options.lease_timeout  # type: ignore[attr-defined]
        try:
            async with session.get(
                req.url, headers={"X-Worker": name, "X-Leased-At": repr(leased_at)}, allow_redirects=False
            ) as resp:
                text = await resp.text()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("%s: %s; retrying later", req.url, exc)
            await persist(partial(frontier.retry, lease, 0.2))
            continue
        if status == 200:
            links = [Request(u, depth=req.depth + 1) for u in LINK.findall(text)]
            await persist(partial(frontier.enqueue_requests, links))
            await settle(frontier, lease)
        else:
            await persist(partial(frontier.fail, lease, f"HTTP {status}"))


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frontier", required=True)
    parser.add_argument("--name", default="w")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--lease-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=f"{args.name} %(levelname)s %(message)s")
    frontier = open_scheduler(
        args.frontier, delay=args.delay, max_in_flight=args.max_in_flight, lease_timeout=args.lease_timeout
    )
    await persist(frontier.__aenter__)
    try:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session, asyncio.TaskGroup() as tg:
            for i in range(args.concurrency):
                tg.create_task(fetch_loop(frontier, session, args.name), name=f"{args.name}-fetch-{i}")
    finally:
        await frontier.close()
    print(f"{args.name}: idle, done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
