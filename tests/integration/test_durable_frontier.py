"""The durable frontiers with real processes: kill -9 of a worker (SQLite, Redis), four workers
sharing one Redis frontier, and Redis itself killed and restarted mid-crawl.

Each test runs its own 2,000-page site on loopback (tests/integration/crawlsite.py) that records
every request, and the worker script tests/integration/frontier_worker.py in real processes (forked
off the fork server: their own PIDs, killed with SIGKILL for real).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from crawlherd.frontier import open_scheduler
from crawlherd.request import Request
from tests.support import forkserver
from tests.support.private_redis import PrivateRedis, private_redis_server

from .crawlsite import CrawlSite

WORKER = Path(__file__).with_name("frontier_worker.py")
PAGES = 2000

pytestmark = pytest.mark.slow


class Worker:
    """One worker process; its output goes to a file shown when a test fails."""

    def __init__(self, proc: asyncio.subprocess.Process | forkserver.ForkedProcess, log: Path) -> None:
        self.proc = proc
        self.log = log

    @classmethod
    async def start(cls, tmp: Path, name: str, frontier: str, *args: str) -> Worker:
        log = tmp / f"{name}.log"
        with log.open("ab") as out:
            proc = await forkserver.exec_python(  # forked off the fork server (tests/support/forkserver.py)
                sys.executable,
                str(WORKER),
                "--frontier",
                frontier,
                "--name",
                name,
                *args,
                stdout=out,
                stderr=out,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
            )
        return cls(proc, log)

    async def wait(self, timeout: float = 150) -> int:
        try:
            async with asyncio.timeout(timeout):
                code = await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"worker did not finish:\n{self.log.read_text()[-3000:]}") from None
        assert code == 0, self.log.read_text()[-3000:]
        return code

    async def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()


async def until_hits(site: CrawlSite, n: int, *workers: Worker) -> None:
    """Wait (bounded) until the site has seen ``n`` requests."""
    async with asyncio.timeout(120):
        while len(site.hits) < n:
            for w in workers:
                assert w.proc.returncode is None, f"worker exited early:\n{w.log.read_text()[-3000:]}"
            await asyncio.sleep(0.02)


async def delete_prefix(url: str, prefix: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.unlink(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def redis_frontier(redis_url: str, unique_name: str) -> AsyncIterator[str]:
    yield f"{redis_url}?prefix={unique_name}"
    await delete_prefix(redis_url, unique_name)


async def seed(url: str, site: CrawlSite) -> None:
    async with open_scheduler(url) as frontier:
        assert await frontier.enqueue_request(Request(site.url(0)))


# -- kill -9 of a worker ---------------------------------------------------------------------------


async def test_sqlite_worker_killed_and_restarted_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    url = f"sqlite:///{db}"
    async with CrawlSite(pages=PAGES, hosts=4, latency=0.005) as site:
        await seed(url, site)
        worker = await Worker.start(tmp_path, "w1", url, "--concurrency", "8")
        await until_hits(site, 600, worker)
        await worker.kill9()
        # What the dead process had in flight, as its file says.
        with sqlite3.connect(db) as con:
            in_flight = con.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
            queued = con.execute("SELECT COUNT(*) FROM requests").fetchone()[0] - in_flight
        assert queued > 0, "the kill came too late to test anything"
        fetched_at_kill = len(site.hits)

        restarted = await Worker.start(tmp_path, "w2", url, "--concurrency", "8")
        await restarted.wait()

        assert site.missing() == []
        twice = site.fetched_twice()
        assert len(twice) <= in_flight, (twice, in_flight)
        assert len(site.hits) > fetched_at_kill
        async with open_scheduler(url) as frontier:
            assert await frontier.idle()
            stats = await frontier.stats()
            assert stats.expired_leases == in_flight  # the dead worker's leases came back at open
            assert stats.acked + stats.failures == PAGES
            # the duplicate filter still refuses what was seen before the kill
            assert not await frontier.enqueue_request(Request(site.url(0)))
            assert not await frontier.enqueue_request(Request(site.url(PAGES - 1)))


@pytest.mark.redis
async def test_redis_worker_killed_and_restarted_loses_nothing(
    tmp_path: Path, redis_frontier: str, redis_url: str
) -> None:
    prefix = redis_frontier.rsplit("=", 1)[1]
    async with CrawlSite(pages=PAGES, hosts=4, latency=0.005) as site:
        await seed(redis_frontier, site)
        worker = await Worker.start(tmp_path, "w1", redis_frontier, "--concurrency", "8", "--lease-timeout", "2")
        await until_hits(site, 600, worker)
        await worker.kill9()
        client = aioredis.Redis.from_url(redis_url)
        try:
            in_flight = int(await client.hget(f"{prefix}:c", "out") or 0)  # the leases the dead worker held
        finally:
            await client.aclose()

        # The restarted worker gets the dead worker's leases back when they expire (2 s).
        restarted = await Worker.start(tmp_path, "w2", redis_frontier, "--concurrency", "8", "--lease-timeout", "2")
        await restarted.wait()

        assert site.missing() == []
        twice = site.fetched_twice()
        assert len(twice) <= in_flight, (twice, in_flight)
        async with open_scheduler(redis_frontier) as frontier:
            assert await frontier.idle()
            stats = await frontier.stats()
            assert stats.expired_leases >= in_flight
            assert stats.acked == PAGES
            assert not await frontier.enqueue_request(Request(site.url(0)))


# -- four workers, one frontier --------------------------------------------------------------------


@pytest.mark.redis
async def test_four_workers_share_one_redis_frontier_and_its_politeness(tmp_path: Path, redis_frontier: str) -> None:
    delay = 0.05
    async with CrawlSite(pages=PAGES, hosts=20) as site:
        await seed(redis_frontier, site)
        args = ("--concurrency", "4", "--delay", str(delay), "--max-in-flight", "1", "--lease-timeout", "120")
        workers = [await Worker.start(tmp_path, f"w{i}", redis_frontier, *args) for i in range(4)]
        for w in workers:
            await w.wait()

        counts = site.counts()
        assert site.missing() == []
        assert [p for p, n in counts.items() if n != 1] == []  # every page exactly once
        by_worker = {hit.worker for hit in site.hits}
        assert by_worker == {"w0", "w1", "w2", "w3"}  # all four took part

        for port, hits in site.by_port().items():
            # Hand-outs of one host are at least `delay` apart, whichever process leased them.
            leased = sorted(h.leased_at for h in hits if h.leased_at is not None)
            assert len(leased) == len(hits)
            gaps = [b - a for a, b in zip(leased, leased[1:], strict=False)]
            assert min(gaps) >= delay - 1e-6, (port, min(gaps))
            # And the server sees it: any 20 consecutive requests to a host span at least 19 delays,
            # less the lateness of the first one (allowed up to 5 delays on this shared machine).
            # Without shared politeness, four workers would pack them into ~5 delays.
            arrivals = [h.at for h in hits]
            spans = [arrivals[i + 19] - arrivals[i] for i in range(len(arrivals) - 19)]
            assert min(spans) >= 14 * delay, (port, min(spans))
            # the workers interleave on each host: politeness really is shared, not per process
            assert len({h.worker for h in hits}) >= 2


# -- Redis killed and restarted --------------------------------------------------------------------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    yield from private_redis_server(tmp_path)


@pytest.mark.redis
async def test_redis_restarted_mid_crawl_the_crawl_resumes_and_loses_nothing(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    url = f"{private_redis.url}?prefix=crawl"
    async with CrawlSite(pages=PAGES, hosts=4, latency=0.005) as site:
        await seed(url, site)
        args = ("--concurrency", "4", "--lease-timeout", "30")
        workers = [await Worker.start(tmp_path, f"w{i}", url, *args) for i in range(2)]
        await until_hits(site, 600, *workers)
        private_redis.kill()
        stalled = len(site.hits)
        await asyncio.sleep(1.0)  # an outage: the workers keep retrying with backoff
        private_redis.start()
        for w in workers:
            await w.wait()

        assert site.missing() == []
        assert len(site.hits) > stalled + 100
        assert len(site.fetched_twice()) <= 2 * 4  # at most the requests in flight at the outage
        logs = "".join(w.log.read_text() for w in workers)
        assert "frontier unavailable" in logs  # the workers did see Redis go away
        async with open_scheduler(url) as frontier:
            assert await frontier.idle()
            assert (await frontier.stats()).acked == PAGES
