"""A worker that dies or hangs, in a fleet sharing a Redis frontier and a Redis broker.

- **SIGKILL while it holds detail pages**: three ``crawlherd worker`` processes, every setting at its
  default. The detail pages hang at the server until every worker holds some; one worker is killed,
  then the server answers. Its pages come back when its frontier leases' liveness runs out (15 s), not
  after ``lease_timeout`` (300 s): every item has its detail page within 30 s of the kill (a wait
  bound: it fails when items are still missing then), and its jobs run again to success.
- **SIGSTOP past its claim**: worker A holds every job, its listing pages held at the server; A is
  stopped, B takes the jobs over when A's claim runs out and runs them to success; A's listing pages
  are then answered with a 404 and A resumed. A's stale failure changes no run it no longer owns: every
  job stays succeeded (by B), 400 items, none twice.

Real processes (``tests.support.processes``), the test's own server, queue, prefix and database.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.db import JobRun, StoredItem
from crawlherd.dispatch.dispatch_service import DispatchService
from tests.integration.test_worker import load
from tests.support.dispatch import dispatch_due, relay_all
from tests.support.fixtures import ON_POSTGRES
from tests.support.httpserver import serve
from tests.support.processes import CliProcess, job_statuses, wait_until
from tests.support.real_brokers import remove

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow, ON_POSTGRES]


@dataclass
class HoldingBoard:
    """``/search?q=K``: ``per_page`` items linking to ``/jobs/K-n``. ``hold_details``: detail pages wait
    until it is cleared (``details_in_flight`` counts them). ``hold_first_listing``: the first request
    of each listing page waits until ``release_listing`` is set, then gets a 404; later ones are served."""

    per_page: int = 10
    detail_fields: bool = True
    hold_details: asyncio.Event = field(default_factory=asyncio.Event)
    details_released: asyncio.Event = field(default_factory=asyncio.Event)
    details_in_flight: int = 0
    hold_first_listing: bool = False
    release_listing: asyncio.Event = field(default_factory=asyncio.Event)
    listing_held: int = 0
    asked: Counter[str] = field(default_factory=Counter)
    url: str = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/search", self._search)
        app.router.add_get("/jobs/{n}", self._job)
        return app

    async def _search(self, request: web.Request) -> web.Response:
        q = request.query.get("q", "")
        self.asked[q] += 1
        if self.hold_first_listing and self.asked[q] == 1:
            self.listing_held += 1
            await self.release_listing.wait()
            return web.Response(status=404, text="gone")
        cards = "".join(f'<article><a href="/jobs/{q}-{n}">{q} job {n}</a></article>' for n in range(self.per_page))
        return web.Response(text=f"<html><body>{cards}</body></html>", content_type="text/html")

    async def _job(self, request: web.Request) -> web.Response:
        if self.hold_details.is_set():
            self.details_in_flight += 1
            try:
                await self.details_released.wait()
            finally:
                self.details_in_flight -= 1
        n = request.match_info["n"]
        return web.Response(text=f"<html><body><p class='salary'>salary of {n}</p></body></html>",
                            content_type="text/html")

    def website(self) -> dict[str, Any]:
        extraction: dict[str, Any] = {"item_selector": "article", "item_url": "a@href", "fields": {"title": "a"}}
        if self.detail_fields:
            extraction["detail_fields"] = {"salary": ".salary"}
        return {
            "name": "board", "base_url": self.url, "search_url_template": f"{self.url}/search?q={{keywords}}",
            "extraction": extraction,
            "politeness": {"min_delay": 0, "max_concurrency": 64, "robots": "ignore"},
        }


@pytest.fixture
async def board() -> AsyncIterator[HoldingBoard]:
    site = HoldingBoard()
    async with serve(site.app()) as served:
        site.url = served.url
        yield site


@pytest.fixture
async def urls(redis_url: str, unique_name: str) -> AsyncIterator[tuple[str, str]]:
    """(broker URL, frontier URL) on the test's own Redis prefixes, every option at its default."""
    broker = f"{redis_url}?prefix={unique_name}"
    frontier = f"{redis_url}?prefix={unique_name}-frontier"
    try:
        yield broker, frontier
    finally:
        await remove(broker, "redis", unique_name)  # the frontier's keys share the prefix


async def _publish(engine: AsyncEngine, broker_url: str, n: int) -> None:
    async with open_broker(broker_url) as broker:
        service = DispatchService(engine, broker)
        await dispatch_due(service)
        assert (await relay_all(service)).published == n


def _worker(engine: AsyncEngine, broker_url: str, frontier_url: str, log: Path, *extra: str) -> CliProcess:
    return CliProcess(["worker", "--database-url", engine.url.render_as_string(hide_password=False),
                       "--broker-url", broker_url, "--frontier-url", frontier_url, "--allow-private", *extra], log)


async def _items(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(StoredItem.data))).scalars().all())


@pytest.mark.timeout(120)
async def test_a_killed_workers_detail_pages_are_fetched_within_30s_with_default_leases(
    engine: AsyncEngine, board: HoldingBoard, tmp_path: Path, urls: tuple[str, str]
) -> None:
    broker_url, frontier_url = urls
    keywords = [f"k{i}" for i in range(6)]  # 60 items, 60 detail pages
    await load(engine, tmp_path, board.website(), keywords, due=True)
    await _publish(engine, broker_url, len(keywords))
    board.hold_details.set()
    workers = [await _worker(engine, broker_url, frontier_url, tmp_path / f"w{i}.log", "--concurrency", "2",
                             "--page-concurrency", "8").start() for i in range(3)]
    try:
        async def every_worker_holds_detail_pages() -> bool:
            return board.details_in_flight >= 17  # two workers hold 16 at most: the third holds some too

        await wait_until(every_worker_holds_detail_pages, alive=workers, deadline=60)
        victim, survivors = workers[0], workers[1:]
        assert victim.proc is not None
        os.kill(victim.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await victim.proc.wait()
        board.hold_details.clear()
        board.details_released.set()

        async def every_item_has_its_detail_page() -> bool:
            items = await _items(engine)
            return len(items) == 60 and all("salary" in data for data in items)

        await wait_until(every_item_has_its_detail_page, alive=survivors, deadline=30)
        items_done = time.monotonic() - killed_at

        async def every_job_succeeded() -> bool:
            return await job_statuses(engine) == ["succeeded"] * len(keywords)

        await wait_until(every_job_succeeded, alive=survivors, deadline=30)
        jobs_done = time.monotonic() - killed_at
        print(f"\nkill -> every item with its detail page: {items_done:.1f} s; every job succeeded: {jobs_done:.1f} s")
    finally:
        for proc in workers[1:]:
            await proc.stop()
    for proc in workers[1:]:
        proc.assert_clean()


@pytest.mark.timeout(120)
async def test_a_resumed_hung_worker_changes_no_run_it_no_longer_owns(
    engine: AsyncEngine, board: HoldingBoard, tmp_path: Path, urls: tuple[str, str]
) -> None:
    broker_url, frontier_url = urls
    broker_url += "&claim_idle=3"  # A's jobs are taken over 3-4 s after it stopped
    keywords = [f"k{i}" for i in range(8)]
    board.per_page, board.detail_fields, board.hold_first_listing = 50, False, True  # 400 items
    await load(engine, tmp_path, board.website(), keywords, due=True)
    await _publish(engine, broker_url, len(keywords))
    a = await _worker(engine, broker_url, frontier_url, tmp_path / "a.log", "--concurrency", "8").start()
    b: CliProcess | None = None
    try:
        async def a_holds_every_listing_page() -> bool:
            return board.listing_held == len(keywords)

        await wait_until(a_holds_every_listing_page, alive=[a], deadline=60)
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)  # A hangs
        b = await _worker(engine, broker_url, frontier_url, tmp_path / "b.log", "--concurrency", "8").start()

        async def b_ran_every_job() -> bool:
            return await job_statuses(engine) == ["succeeded"] * len(keywords)

        await wait_until(b_ran_every_job, alive=[b], deadline=60)
        board.release_listing.set()  # A's listing pages fail (a 404) ...
        os.kill(a.proc.pid, signal.SIGCONT)  # ... and A resumes: its jobs fail, in its eyes
        assert await a.stop() == 0, a.log
    finally:
        if a.proc is not None and a.proc.returncode is None:
            os.kill(a.proc.pid, signal.SIGCONT)
            await a.stop()
        if b is not None:
            await b.stop()
    assert b is not None
    b.assert_clean()
    async with engine.connect() as conn:
        runs = (await conn.execute(select(JobRun.status, JobRun.error))).all()
        items, distinct = (await conn.execute(
            select(func.count(), func.count(func.distinct(StoredItem.fingerprint))))).one()
    assert [(status, error) for status, error in runs] == [("succeeded", None)] * len(keywords), runs
    assert (items, distinct) == (400, 400)
    assert "taken over or finished by another worker" in a.log, a.log
