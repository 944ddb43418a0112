"""Faults under a fleet of ``crawlherd worker`` processes sharing a Redis frontier: 8 jobs of 5 listing
pages of 10 items each (400 items, each with a detail page), counted at the end by the run key (one
``job_runs`` row per target and slot, each ``succeeded``) and the item key (400 rows, each with its
detail page's field).

- The frontier's Redis restarted **empty** (a private ``redis-server --save "" --appendonly no``, as many
  caches run) while the jobs are in flight: each job's owner finds its first listing page no longer
  known to the frontier, reads its listing again, and its detail pages out are queued again.
- Every worker of the fleet stopped by SIGTERM at once (a deploy), then started again.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.db import JobRun, ScrapeTarget, StoredItem
from crawlherd.dispatch.dispatch_service import DispatchService
from crawlherd.dispatch.targets import import_targets
from tests.support.fixtures import ON_POSTGRES
from tests.support.httpserver import serve
from tests.support.private_redis import PrivateRedis
from tests.support.processes import BAD_LOG, CliProcess, wait_until
from tests.support.real_brokers import remove

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, ON_POSTGRES]

KEYWORDS = [f"k{n}" for n in range(8)]
PAGES, PER_PAGE = 5, 10
ITEMS = len(KEYWORDS) * PAGES * PER_PAGE


@dataclass
class PagedBoard:
    """``/search?q=K&page=N`` lists 10 jobs (``/jobs/K-N-i``), for any N; each request is counted.
    ``detail_delay``: seconds a detail page takes."""

    detail_delay: float = 0.0
    url: str = ""
    hits: Counter[str] = field(default_factory=Counter)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/search", self._search)
        app.router.add_get("/jobs/{id}", self._job)
        return app

    async def _search(self, request: web.Request) -> web.Response:
        self.hits[request.path_qs] += 1
        q, page = request.query["q"], request.query.get("page", "1")
        cards = "".join(f'<article><a href="/jobs/{q}-{page}-{i}">{q} {page} {i}</a></article>'
                        for i in range(PER_PAGE))
        return web.Response(text=f"<html><body>{cards}</body></html>", content_type="text/html")

    async def _job(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        await asyncio.sleep(self.detail_delay)
        return web.Response(text=f"<p class='salary'>salary of {request.match_info['id']}</p>",
                            content_type="text/html")

    def listing_fetches(self) -> int:
        return sum(n for p, n in self.hits.items() if p.startswith("/search"))

    def detail_fetches(self) -> int:
        return sum(n for p, n in self.hits.items() if p.startswith("/jobs/"))


@pytest.fixture
async def paged_board() -> AsyncIterator[PagedBoard]:
    site = PagedBoard()
    async with serve(site.app()) as served:
        site.url = served.url
        yield site


async def load_jobs(engine: AsyncEngine, board: PagedBoard, tmp_path: Path, broker_url: str) -> None:
    """The 8 targets, due now, and their jobs published."""
    site = {
        "name": "board", "base_url": board.url, "search_url_template": f"{board.url}/search?q={{keywords}}",
        "pagination": {"type": "page_param", "param": "page", "max_pages": PAGES},
        "extraction": {"item_selector": "article", "item_url": "a@href", "fields": {"title": "a"},
                       "detail_fields": {"salary": ".salary"}},
        "politeness": {"min_delay": 0, "max_concurrency": 16, "robots": "ignore"},
    }
    start = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    target = {"website": "board", "keywords": KEYWORDS, "every": "1h", "start_at": start}
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump({"websites": [site], "targets": [target]}), encoding="utf-8")
    await import_targets(engine, path)
    async with engine.begin() as conn:
        await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC) - timedelta(seconds=1)))
    async with open_broker(broker_url) as broker:
        await DispatchService(engine, broker).run_once()


def workers(n: int, tmp_path: Path, *, db: str, broker: str, frontier: str, tag: str = "") -> list[CliProcess]:
    args = ["worker", "--database-url", db, "--broker-url", broker, "--frontier-url", frontier, "--allow-private",
            "--concurrency", "3", "--page-concurrency", "4", "--backoff", "0.2"]
    env = {"CRAWLHERD_HEARTBEAT_INTERVAL": "1", "CRAWLHERD_SHUTDOWN_TIMEOUT": "1"}
    return [CliProcess(args, tmp_path / f"worker{tag}{i}.log", env=env) for i in range(n)]


async def runs(engine: AsyncEngine) -> list[tuple[str, int]]:
    async with engine.connect() as conn:
        return [(r.status, r.attempts) for r in await conn.execute(select(JobRun.status, JobRun.attempts))]


async def job_states(engine: AsyncEngine) -> list[str]:
    """Each run: target, status, attempts, listing done or not, detail pages by status (for a failure's message)."""
    from crawlherd.db.models import JobDetail

    async with engine.connect() as conn:
        counts = Counter((t, st) for t, st in await conn.execute(select(JobDetail.target_id, JobDetail.status)))
        return [f"target {r.target_id}: {r.status} attempt {r.attempts}, listed {r.listed_at is not None}, "
                f"details out {counts[(r.target_id, 'out')]}, failed {counts[(r.target_id, 'failed')]}"
                for r in await conn.execute(select(JobRun.target_id, JobRun.status, JobRun.attempts, JobRun.listed_at)
                                            .order_by(JobRun.target_id))]


async def items(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(StoredItem.data))).scalars().all()
    return [json.loads(d) if isinstance(d, str) else d for d in rows]


async def assert_all_done(engine: AsyncEngine, procs: list[CliProcess], *, deadline: float) -> None:
    """Every job ends succeeded and every item has its detail page, within ``deadline`` seconds."""

    async def every_job_succeeded() -> bool:
        return [s for s, _ in await runs(engine)] == ["succeeded"] * len(KEYWORDS)

    try:
        await wait_until(every_job_succeeded, alive=procs, deadline=deadline)
    except AssertionError as exc:
        states = await job_states(engine) if hasattr(JobRun, "listed_at") else await runs(engine)
        raise AssertionError(f"{states}\n{exc}") from None
    stored = await items(engine)  # by the item key: one row per item
    assert len(stored) == ITEMS
    without = [d.get("title") for d in stored if "salary" not in d]
    assert without == [], f"{len(without)} of {ITEMS} items have no detail page: {without[:10]}"


@pytest.mark.timeout(240)  # the waits inside have deadlines of their own, which say more
async def test_the_frontiers_redis_restarted_empty_under_three_workers(
    engine: AsyncEngine, paged_board: PagedBoard, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    """The frontier's Redis (no persistence) killed while the jobs are in flight and started empty: the
    workers carry on, each job's owner finds its pages lost and reads its listing again; every job
    ends succeeded once, every item is stored once with its detail page."""
    paged_board.detail_delay = 0.05
    frontier = PrivateRedis(tmp_path, persistent=False)
    frontier.start()
    broker = f"{redis_url}?prefix={unique_name}"
    procs = workers(3, tmp_path, db=str(engine.url), broker=broker, frontier=f"{frontier.url}?prefix=f")
    try:
        await load_jobs(engine, paged_board, tmp_path, broker)
        for p in procs:
            await p.start()

        async def mid_crawl() -> bool:
            return paged_board.listing_fetches() >= 15 and paged_board.detail_fetches() >= 40

        await wait_until(mid_crawl, alive=procs, every=0.02, deadline=30)
        frontier.kill()  # SIGKILL by PID: every queued page, lease and seen fingerprint is gone
        frontier.start()  # empty, same port
        await assert_all_done(engine, procs, deadline=90)  # a bound on a loaded machine, not a timing
        for p in procs:
            await p.stop()
    finally:
        for p in procs:
            if p.proc is not None:
                await p.stop()
        frontier.kill()
        await remove(broker, "redis", unique_name)
    for p in procs:
        p.assert_clean()
    assert sorted(a for _, a in await runs(engine)) == [1] * len(KEYWORDS)  # no job retried: read again in place
    logs = "".join(p.log for p in procs)
    assert "the frontier lost job" in logs, logs[-3000:]
    for bad in BAD_LOG:
        assert bad not in logs


@pytest.mark.timeout(240)  # the waits inside have deadlines of their own, which say more
async def test_sigterm_to_every_worker_at_once_then_a_restart(
    engine: AsyncEngine, paged_board: PagedBoard, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    """A deploy: every worker of the fleet gets SIGTERM at once while jobs and detail pages are in
    flight; each drains or gives its jobs back (exit 0, no traceback) and its frontier pages go back.
    Started again, the fleet completes every job once, every item once with its detail page."""
    paged_board.detail_delay = 0.2  # the drain (1 s) cannot finish the jobs: they are given back
    broker = f"{redis_url}?prefix={unique_name}b"
    frontier = f"{redis_url}?prefix={unique_name}f&lease_timeout=300"  # only a give-back brings pages back
    first = workers(3, tmp_path, db=str(engine.url), broker=broker, frontier=frontier)
    second = workers(3, tmp_path, db=str(engine.url), broker=broker, frontier=frontier, tag="-again")
    try:
        await load_jobs(engine, paged_board, tmp_path, broker)
        for p in first:
            await p.start()

        async def mid_crawl() -> bool:
            return paged_board.listing_fetches() >= 10 and paged_board.detail_fetches() >= 20

        await wait_until(mid_crawl, alive=first, every=0.02, deadline=30)
        codes = await asyncio.gather(*(p.stop() for p in first))  # SIGTERM to all at once
        assert codes == [0] * len(first), "".join(p.log for p in first)
        assert [s for s, _ in await runs(engine)].count("succeeded") < len(KEYWORDS)  # work was left
        for p in second:
            await p.start()
        await assert_all_done(engine, second, deadline=90)  # far below the leases' 300 s
        for p in second:
            await p.stop()
    finally:
        for p in (*first, *second):
            if p.proc is not None:
                await p.stop()
        await remove(broker, "redis", f"{unique_name}b")
        await remove(frontier, "redis", f"{unique_name}f")
    for p in (*first, *second):
        p.assert_clean()
