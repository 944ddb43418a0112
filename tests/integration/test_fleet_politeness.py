"""Politeness for every page across every worker: five ``crawlherd worker`` processes share one Redis
frontier and one Redis broker, against one website with ``min_delay = 1s``. Measured by the server's
own (kernel) timestamps: no two requests to that host closer than 1 s -- listing pages (two per job,
``page_param`` pagination) and detail pages alike -- and a 429 with ``Retry-After: 3`` answered to one
worker holds every worker off that host for 3 s."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.db import JobRun, ScrapeTarget
from crawlherd.dispatch.dispatch_service import DispatchService
from crawlherd.dispatch.targets import import_targets
from tests.servers.timestamping import Stamp, TimestampingServer, max_overlap
from tests.support.dispatch import dispatch_due, relay_all
from tests.support.forkserver import exec_crawlherd
from tests.support.real_brokers import remove

pytestmark = [pytest.mark.slow, pytest.mark.redis]

WORKERS = 5
KEYWORDS = ["a", "b"]
RETRY_AFTER = 3.0


class JobBoard(TimestampingServer):
    """``/search?q=X&page=N``: one job card linking to ``/jobs/X-N``; ``/jobs/a-1`` answers 429 with
    ``Retry-After: 3`` the first time."""

    limited = False

    def _response(self, path: str) -> bytes:
        parts = urlsplit(path)
        status, extra = b"200 OK", b""
        if parts.path == "/search":
            q = parse_qs(parts.query)
            word, page = q.get("q", [""])[0], q.get("page", ["1"])[0]
            body = f'<html><body><article><a href="/jobs/{word}-{page}">{word} {page}</a></article></body></html>'
        elif parts.path.startswith("/jobs/"):
            if parts.path == "/jobs/a-1" and not self.limited:
                self.limited = True
                status, extra = b"429 Too Many Requests", f"Retry-After: {RETRY_AFTER:.0f}\r\n".encode()
            body = f"<html><body><p class='salary'>{parts.path}</p></body></html>"
        else:
            return super()._response(path)
        data = body.encode()
        return (b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html\r\n" + extra + b"Content-Length: "
                + str(len(data)).encode() + b"\r\n\r\n" + data)


def board_site(name: str, base: str, *, pages: int, min_delay: float, max_concurrency: int, robots: str
               ) -> dict[str, object]:
    """A job board website at ``base``: ``/search?q=<keyword>&page=N`` (``pages`` of them), each card's
    ``a`` a detail page with a ``.salary``; its politeness as given."""
    return {
        "name": name, "base_url": base, "search_url_template": f"{base}/search?q={{keywords}}",
        "pagination": {"type": "page_param", "param": "page", "start": 1, "max_pages": pages},
        "extraction": {"item_selector": "article", "item_url": "a@href", "fields": {"title": "a"},
                       "detail_fields": {"salary": ".salary"}},
        "politeness": {"min_delay": min_delay, "max_concurrency": max_concurrency, "robots": robots},
    }


async def crawl_with_workers(
    engine: AsyncEngine, tmp_path: Path, redis_url: str, unique_name: str, server: TimestampingServer,
    site: dict[str, object], keywords: list[str], expected: set[str], workers: int,
) -> None:
    """Import ``site`` with a target for ``keywords``, dispatch its jobs to a Redis broker and run
    ``workers`` ``crawlherd worker`` processes on it and one Redis frontier until every job succeeded
    and the server saw every path of ``expected``."""
    broker_url = f"{redis_url}?prefix={unique_name}b"
    frontier_url = f"{redis_url}?prefix={unique_name}f"
    document = {"websites": [site], "targets": [{"website": site["name"], "keywords": keywords, "every": "1h"}]}
    (tmp_path / "targets.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    await import_targets(engine, tmp_path / "targets.yaml")
    async with engine.begin() as conn:
        await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC) - timedelta(seconds=1)))
    async with open_broker(broker_url) as broker:
        service = DispatchService(engine, broker)
        await dispatch_due(service)
        await relay_all(service)

    procs = []
    logs = []
    try:
        for n in range(workers):
            log = (tmp_path / f"worker{n}.log").open("wb")
            logs.append(log)
            procs.append(await exec_crawlherd(
                "worker", "--database-url", str(engine.url),
                "--broker-url", broker_url, "--frontier-url", frontier_url, "--allow-private",
                "--concurrency", "2", stdout=log, stderr=asyncio.subprocess.STDOUT, env=dict(os.environ),
            ))
        while True:  # every job done and every detail page fetched (bounded by the timeout)
            async with engine.connect() as conn:
                done = (await conn.execute(select(JobRun.status))).scalars().all()
            fetched = {s.path for s in server.stamps if s.path.startswith("/jobs/")}
            if list(done) == ["succeeded"] * len(keywords) and fetched >= expected:
                break
            assert all(p.returncode is None for p in procs)
            await asyncio.sleep(0.2)
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        await asyncio.gather(*(asyncio.wait_for(p.wait(), 60) for p in procs))
        for log in logs:
            log.close()
        await remove(broker_url, "redis", f"{unique_name}b")
        await remove(frontier_url, "redis", f"{unique_name}f")


@pytest.mark.timeout(180)
async def test_five_workers_on_one_redis_frontier_keep_one_websites_min_delay(
    engine: AsyncEngine, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    with JobBoard() as server:
        base = server.urls[0]
        site = board_site("board", base, pages=2, min_delay=1.0, max_concurrency=1, robots="ignore")
        expected = {f"/jobs/{w}-{p}" for w in KEYWORDS for p in (1, 2)}
        await crawl_with_workers(engine, tmp_path, redis_url, unique_name, server, site, KEYWORDS, expected, WORKERS)
        stamps: list[Stamp] = sorted(server.stamps, key=lambda s: s.at)

    listing = [s for s in stamps if s.path.startswith("/search")]
    assert len(listing) == 2 * len(KEYWORDS)  # listing pages are part of what is measured
    gaps = [b.at - a.at for a, b in zip(stamps, stamps[1:], strict=False)]
    # The frontier spaces the leases and the send gate (stamped in Redis right before each send) the
    # sends: the server itself sees the whole min_delay between any two requests, whoever sent them.
    print(f"min gap at the server: {min(gaps):.3f} s over {len(stamps)} requests")
    assert min(gaps) >= 1.0, [(s.path, round(s.at - stamps[0].at, 3)) for s in stamps]
    [limited] = [i for i, s in enumerate(stamps) if s.path == "/jobs/a-1"][:1]
    after = stamps[limited + 1]
    assert after.at - stamps[limited].at >= RETRY_AFTER, (after.path, after.at - stamps[limited].at)


class BusyBoard(TimestampingServer):
    """``/search?q=X&page=N``: three job cards linking to ``/jobs/X-N-i``; every response held a while."""

    def _response(self, path: str) -> bytes:
        parts = urlsplit(path)
        if parts.path == "/search":
            q = parse_qs(parts.query)
            word, page = q.get("q", [""])[0], q.get("page", ["1"])[0]
            cards = "".join(f'<article><a href="/jobs/{word}-{page}-{i}">{word} {page} {i}</a></article>'
                            for i in range(CARDS))
            body = f"<html><body>{cards}</body></html>"
        elif parts.path.startswith("/jobs/"):
            body = f"<html><body><p class='salary'>{parts.path}</p></body></html>"
        else:
            return super()._response(path)
        data = body.encode()
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: " + str(len(data)).encode()
                + b"\r\n\r\n" + data)


CARDS = 3
CAP = 2


@pytest.mark.timeout(180)
async def test_four_workers_on_one_redis_frontier_keep_one_websites_max_concurrency(
    engine: AsyncEngine, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    """Four workers (two jobs at once each) against one website with ``max_concurrency = 2`` and no
    delay; the server holds each response 0.3 s and records when it had each request in hand. At no
    instant did it have more than two requests to that host -- listing and detail pages alike -- and it
    did have two (the cap is reached, not just respected by going one at a time)."""
    keywords = [f"k{n}" for n in range(6)]
    with BusyBoard(hold=0.3) as server:
        base = server.urls[0]
        site = board_site("busy", base, pages=2, min_delay=0, max_concurrency=CAP, robots="ignore")
        expected = {f"/jobs/{w}-{p}-{i}" for w in keywords for p in (1, 2) for i in range(CARDS)}
        await crawl_with_workers(engine, tmp_path, redis_url, unique_name, server, site, keywords, expected, 4)
        spans = list(server.spans)

    listing = [s for s in spans if s.path.startswith("/search")]
    assert len(listing) == 2 * len(keywords)  # listing pages are part of what is measured
    assert {s.path for s in spans if s.path.startswith("/jobs/")} == expected
    most = max_overlap(spans)
    print(f"most requests in hand at the server at once: {most} over {len(spans)} requests")
    assert most <= CAP, sorted((round(s.start - spans[0].start, 3), round(s.end - spans[0].start, 3), s.path)
                               for s in spans)
    assert most == CAP  # reached: the test can see a breach


@pytest.mark.timeout(180)
async def test_three_workers_keep_the_crawl_delay_of_robots_txt_over_the_websites_min_delay(
    engine: AsyncEngine, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    """robots.txt asks ``Crawl-delay: 1``, the website's ``min_delay`` is 0.2 s and it obeys robots.txt:
    three workers sharing the frontier, a job each, keep 1 s between any two of their requests to the
    host at the server -- the listing pages, which learn the Crawl-delay, and the detail pages they queue
    (each listing page once set the host's delay back to min_delay as it queued its detail pages). Its
    ``max_concurrency`` of 3 lets the workers' pages be in flight together: only the delay spaces them."""
    keywords = ["k0", "k1", "k2"]
    with BusyBoard(robots_txt="User-agent: *\nCrawl-delay: 1\n") as server:
        base = server.urls[0]
        site = board_site("slow", base, pages=1, min_delay=0.2, max_concurrency=3, robots="obey")
        expected = {f"/jobs/{w}-1-{i}" for w in keywords for i in range(CARDS)}
        await crawl_with_workers(engine, tmp_path, redis_url, unique_name, server, site, keywords, expected, 3)
        stamps = sorted((s for s in server.stamps if s.path != "/robots.txt"), key=lambda s: s.at)

    assert {s.path for s in stamps if s.path.startswith("/jobs/")} == expected
    gaps = [b.at - a.at for a, b in zip(stamps, stamps[1:], strict=False)]
    print(f"min gap at the server: {min(gaps):.3f} s over {len(stamps)} requests")
    assert min(gaps) >= 1.0, [(s.path, round(s.at - stamps[0].at, 3)) for s in stamps]


@pytest.mark.timeout(180)
async def test_workers_starting_jobs_of_one_host_at_once_fetch_its_robots_txt_once(
    engine: AsyncEngine, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    """Three workers, two jobs each, all of one host with no delay, start at once: each needs the host's
    robots.txt before its first page. The first to ask claims the fetch in the shared frontier; the others
    wait for what it shares -- the host sees robots.txt once, not once per worker."""
    keywords = [f"k{n}" for n in range(6)]
    with BusyBoard(robots_txt="User-agent: *\nDisallow: /private\n", hold=0.2) as server:
        base = server.urls[0]
        site = board_site("fast", base, pages=1, min_delay=0, max_concurrency=8, robots="obey")
        expected = {f"/jobs/{w}-1-{i}" for w in keywords for i in range(CARDS)}
        await crawl_with_workers(engine, tmp_path, redis_url, unique_name, server, site, keywords, expected, 3)
        robots = [s for s in server.stamps if s.path == "/robots.txt"]

    assert len(robots) == 1, [(round(s.at - robots[0].at, 3), s.path) for s in robots]
