"""The worker against a real local HTTP server and a real broker (SQLite file): a website's robots
policy for listing and detail pages, a version-1 job message published before the upgrade, and one
website's politeness holding across the listing pages of concurrent jobs (they share the frontier)."""

from __future__ import annotations

import asyncio
import json
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
from crawlherd.console.overview import overview
from crawlherd.db import JobRun, ScrapeTarget, StoredItem, Website
from crawlherd.db.models import JobAttempt, JobDetail
from crawlherd.dispatch.embedded import run_embedded
from crawlherd.dispatch.targets import import_targets
from crawlherd.fetch.base import FetchLimits
from crawlherd.messages import idempotency_key, job_id_for
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.support.httpserver import serve
from tests.support.processes import wait_until

ROBOTS = "User-agent: *\nDisallow: /private/\n"


@dataclass
class Board:
    """A tiny job board: ``/search`` and ``/private/search`` list three jobs each (their detail pages
    under ``/jobs/`` or ``/private/jobs/``); ``/robots.txt`` disallows ``/private/``. Every request
    is logged; ``slow`` seconds per listing page, with the number of requests in flight recorded."""

    slow: float = 0.0
    failing_pages: set[str] = field(default_factory=set)  # listing pages (``page=``) answered with a 500
    paths: list[str] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    url: str = ""
    #: Detail pages wait for it when set; ``missing`` detail pages answer 404.
    hold: asyncio.Event | None = None
    missing: set[str] = field(default_factory=set)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/{prefix:(private/)?}search", self._search)
        app.router.add_get("/{prefix:(private/)?}jobs/{n}", self._job)
        return app

    async def _robots(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        return web.Response(text=ROBOTS)

    async def _search(self, request: web.Request) -> web.Response:
        self.paths.append(request.path_qs)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.slow:
                await asyncio.sleep(self.slow)
            if request.query.get("page") in self.failing_pages:
                return web.Response(status=500, text="down")
            prefix = request.match_info["prefix"]
            job_prefix = request.query.get("jobs", prefix)
            q = request.query.get("q", "")
            cards = "".join(
                f'<article><a href="/{job_prefix}jobs/{q}-{n}">{q} job {n}</a></article>' for n in range(3)
            )
            return web.Response(text=f"<html><body>{cards}</body></html>", content_type="text/html")
        finally:
            self.in_flight -= 1

    async def _job(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        if self.hold is not None:
            await self.hold.wait()
        if request.match_info["n"] in self.missing:
            raise web.HTTPNotFound()
        return web.Response(
            text=f"<html><body><p class='salary'>salary of {request.match_info['n']}</p></body></html>",
            content_type="text/html",
        )

    def fetched(self, prefix: str) -> list[str]:
        return [p for p in self.paths if p.startswith(prefix)]


@pytest.fixture
async def board() -> AsyncIterator[Board]:
    site = Board()
    async with serve(site.app()) as served:
        site.url = served.url
        yield site


def website(board: Board, *, robots: str, search: str = "search", jobs: str = "", **extra: Any) -> dict[str, Any]:
    query = f"&jobs={jobs}" if jobs else ""
    return {
        "name": "board",
        "base_url": board.url,
        "search_url_template": f"{board.url}/{search}?q={{keywords}}{query}",
        "extraction": {
            "item_selector": "article",
            "item_url": "a@href",
            "fields": {"title": "a"},
            "detail_fields": {"salary": ".salary"},
        },
        "politeness": {"min_delay": 0, "max_concurrency": 4, "robots": robots},
        **extra,
    }


async def load(engine: AsyncEngine, tmp_path: Path, site: dict[str, Any], keywords: list[str], *, due: bool) -> None:
    # Hourly from a minute ago: the next slot is an hour away whatever the clock says (an hourly grid
    # on the hour would bring a second slot due when a test runs across the hour).
    start = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    target = {"website": "board", "keywords": keywords, "every": "1h", "start_at": start}
    document = {"websites": [site], "targets": [target]}
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    await import_targets(engine, path)
    if due:
        # a second ago: SQLite's clock (the dispatcher's) has whole milliseconds, and a tick within the
        # same millisecond as this read of the local clock found the target not due yet
        async with engine.begin() as conn:
            await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC) - timedelta(seconds=1)))


async def run_until_idle(engine: AsyncEngine, tmp_path: Path, **options: Any) -> Worker:
    db_url = str(engine.url)
    async with open_broker(db_url) as broker:
        worker = Worker(
            engine, broker, WorkerOptions(limits=FetchLimits(allow_private_addresses=True), backoff=0.1, **options)
        )
        async with worker:
            await run_embedded(
                engine, broker, worker, stop=asyncio.Event(), interval=0.1, until_idle=True, progress_every=0.1
            )
    return worker


async def runs(engine: AsyncEngine) -> list[tuple[str, int, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(JobRun.status, JobRun.attempts, JobRun.error).order_by(JobRun.id))
        return [tuple(r) for r in rows]  # type: ignore[misc]


async def items(engine: AsyncEngine) -> dict[str, dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(StoredItem.url, StoredItem.data))
        return {url: json.loads(data) if isinstance(data, str) else data for url, data in rows}


# -- robots policy -------------------------------------------------------------------------------


async def test_obeying_robots_the_worker_does_not_fetch_a_disallowed_listing_page(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    await load(engine, tmp_path, website(board, robots="obey", search="private/search"), ["python"], due=True)
    worker = await run_until_idle(engine, tmp_path, max_attempts=3)
    assert board.fetched("/private/") == []
    assert "/robots.txt" in board.paths
    [(status, attempts, error)] = await runs(engine)
    assert (status, attempts) == ("dead", 1)  # no attempt can do better: dead at once, not retried
    assert "robots.txt" in (error or "")
    assert worker.stats.dead == 1 and await items(engine) == {}


async def test_ignoring_robots_the_worker_fetches_a_disallowed_listing_page(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    await load(engine, tmp_path, website(board, robots="ignore", search="private/search"), ["python"], due=True)
    await run_until_idle(engine, tmp_path)
    assert board.fetched("/private/search") == ["/private/search?q=python"]
    assert [r[0] for r in await runs(engine)] == ["succeeded"]
    assert len(await items(engine)) == 3


async def test_obeying_robots_the_worker_does_not_fetch_disallowed_detail_pages(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    await load(engine, tmp_path, website(board, robots="obey", jobs="private/"), ["python"], due=True)
    worker = await run_until_idle(engine, tmp_path)
    assert board.fetched("/search") == ["/search?q=python&jobs=private/"]
    assert board.fetched("/private/") == []
    assert [r[0] for r in await runs(engine)] == ["succeeded"]
    stored = await items(engine)
    assert len(stored) == 3 and all("salary" not in fields for fields in stored.values())  # listing fields kept
    assert worker.stats.detail_failures == 3


async def test_ignoring_robots_the_worker_fetches_disallowed_detail_pages(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    await load(engine, tmp_path, website(board, robots="ignore", jobs="private/"), ["python"], due=True)
    await run_until_idle(engine, tmp_path)
    assert sorted(board.fetched("/private/")) == [f"/private/jobs/python-{n}" for n in range(3)]
    stored = await items(engine)
    assert sorted(f["salary"] for f in stored.values()) == [f"salary of python-{n}" for n in range(3)]


# -- a version-1 message: an unknown version (version 1 was never released) ------------------------


async def test_a_version_1_message_on_the_broker_is_dead_lettered_as_an_unknown_version(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    site = website(board, robots="obey")
    await load(engine, tmp_path, site, ["rust"], due=False)  # not due: only the v1 message is delivered
    async with engine.connect() as conn:
        target_id = (await conn.execute(select(ScrapeTarget.id))).scalar_one()
        website_id = (await conn.execute(select(Website.id))).scalar_one()
    slot = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)
    v1 = {  # the pre-release form (schema_version 1, an untyped metadata dict)
        "schema_version": 1,
        "job_id": job_id_for(target_id, slot),
        "idempotency_key": idempotency_key(target_id, slot),
        "target_id": target_id,
        "slot_at": "2026-11-01T06:00:00Z",
        "website_id": website_id,
        "website_name": "board",
        "search_url": f"{board.url}/search?q=rust",
        "requires_playwright": False,
        "pagination_type": "none",
        "keywords_used": "rust",
        "location_used": None,
        "attempt_count": 0,
        "metadata": {
            "base_url": board.url,
            "pagination": {"selector": None, "param": "page", "start": 1, "step": 1, "max_pages": 10},
            "extraction": site["extraction"],
            "politeness": {"min_delay": 0.0, "max_concurrency": 4, "robots": "obey"},
            "site": {},
        },
        "created_at": "2026-11-01T06:00:01Z",
    }
    async with open_broker(str(engine.url)) as broker:
        await broker.publish(json.dumps(v1).encode(), key=v1["idempotency_key"])
    await run_until_idle(engine, tmp_path)
    async with open_broker(str(engine.url)) as broker:
        dead = await broker.dead_letters(limit=10)
    assert [d.key for d in dead] == [v1["idempotency_key"]]
    assert "unknown job message schema_version 1" in dead[0].reason
    assert await runs(engine) == [] and board.fetched("/search") == []  # nothing crawled, no run recorded


# -- politeness across jobs: listing pages go through the one frontier ----------------------------


async def test_listing_pages_of_concurrent_jobs_keep_the_websites_max_concurrency(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    board.slow = 0.2  # each listing page takes a while: concurrent jobs would overlap on the server
    site = website(board, robots="ignore")
    site["politeness"] = {"min_delay": 0, "max_concurrency": 1, "robots": "ignore"}
    site["extraction"] = {"item_selector": "article", "item_url": "a@href", "fields": {"title": "a"}}
    await load(engine, tmp_path, site, ["a", "b", "c", "d"], due=True)
    worker = await run_until_idle(engine, tmp_path, concurrency=4)
    assert [r[0] for r in await runs(engine)] == ["succeeded"] * 4
    assert len(board.fetched("/search")) == 4
    assert board.most_in_flight == 1  # max_concurrency = 1 held, though 4 jobs ran at once
    assert worker.stats.pages == 4


# -- a listing page read by another worker sharing the frontier -----------------------------------


@pytest.fixture
async def shared_frontier_url(redis_url: str, unique_name: str) -> AsyncIterator[str]:
    """A Redis frontier (its keys are deleted afterwards)."""
    yield f"{redis_url}?prefix={unique_name}f"
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{unique_name}f*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.mark.redis
async def test_a_listing_read_by_another_worker_is_reported_to_the_jobs_owner(
    engine: AsyncEngine, board: Board, tmp_path: Path, shared_frontier_url: str
) -> None:
    """The owner takes the job but runs no page loop; another worker, sharing its frontier (Redis) and
    consuming another broker, reads the listing and its detail pages; the owner learns the outcome from
    ``job_runs`` and acks."""
    from crawlherd.dispatch.dispatch_service import DispatchService

    await load(engine, tmp_path, website(board, robots="obey"), ["go"], due=True)
    frontier_url = shared_frontier_url
    limits = FetchLimits(allow_private_addresses=True)
    async with open_broker(str(engine.url)) as jobs, open_broker(f"sqlite:///{tmp_path / 'empty.db'}") as empty:
        await DispatchService(engine, jobs).run_once()
        async for delivery in jobs.consume(prefetch=1):  # noqa: B007 - the first delivery is all it takes
            break
        owner = Worker(
            engine,
            jobs,
            WorkerOptions(name="owner", frontier_url=frontier_url, limits=limits, poll_interval=0.1),
        )
        other = Worker(
            engine,
            empty,
            WorkerOptions(name="other", frontier_url=frontier_url, limits=limits),
        )
        stop = asyncio.Event()
        async with owner, other:
            pages = asyncio.create_task(other.run(stop))
            await owner.handle(delivery)  # returns once the outcome is found in job_runs
            while not await other.idle():  # noqa: ASYNC110 - the detail pages, still in flight
                await asyncio.sleep(0.05)
            stop.set()
            await pages
        assert await jobs.pending() == 0  # acked by its owner
    async with engine.connect() as conn:
        run = (await conn.execute(select(JobRun.status, JobRun.worker, JobRun.pages, JobRun.items_new))).one()
    assert tuple(run) == ("succeeded", "owner", 1, 3)
    # a job's counters are its owner's, as in job_runs (one definition), though the other worker fetched
    assert (owner.stats.succeeded, owner.stats.pages, owner.stats.items_new) == (1, 1, 3)
    assert other.stats.items_new == 0 and other.stats.pages == 0
    assert other.stats.detail_pages == 3 and other.stats.received == 0
    stored = await items(engine)
    assert sorted(f["salary"] for f in stored.values()) == [f"salary of go-{n}" for n in range(3)]


# -- honest completion: a job succeeds once its detail pages are settled -------------------------


async def test_a_job_succeeds_only_once_its_detail_pages_are_stored_or_failed(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    """Its listing done, the job stays ``running`` ("listing done, 3 detail pages still out") while
    the server holds its detail pages; released, it succeeds, one of them failed with its reason."""
    from crawlherd.console.explain import explain
    from crawlherd.console.jobs import JobFilter, get_job, list_jobs
    from crawlherd.dispatch.dispatch_service import DispatchService

    board.hold, board.missing = asyncio.Event(), {"go-2"}
    await load(engine, tmp_path, website(board, robots="ignore"), ["go"], due=True)
    limits = FetchLimits(allow_private_addresses=True)

    async def details() -> dict[str, str]:
        async with engine.connect() as conn:
            return {i: st for i, st in await conn.execute(select(JobDetail.item, JobDetail.status))}

    async def listed_and_held() -> bool:
        async with engine.connect() as conn:
            run = (await conn.execute(select(JobRun.status, JobRun.listed_at))).first()
        return run is not None and run.listed_at is not None and len(board.fetched("/jobs/")) == 3

    async with open_broker(str(engine.url)) as broker:
        worker = Worker(engine, broker, WorkerOptions(limits=limits, poll_interval=0.05, backoff=0.1))
        await DispatchService(engine, broker).run_once()
        stop = asyncio.Event()
        async with worker:
            task = asyncio.create_task(worker.run(stop))
            await wait_until(listed_and_held, deadline=20)
            assert [r[0] for r in await runs(engine)] == ["running"]
            assert sorted((await details()).values()) == ["out"] * 3
            [shown] = await list_jobs(engine, JobFilter())
            assert shown.status == "running" and shown.details_out == 3
            assert "listing done, 3 detail pages still out" in shown.progress
            why = await explain(engine, shown.target_id)
            assert why.verdict == "running" and "3 detail page(s) still out" in why.summary, why
            board.hold.set()

            async def finished() -> bool:
                return [r[0] for r in await runs(engine)] == ["succeeded"]

            await wait_until(finished, deadline=20)
            stop.set()
            await task
    [(item, status)] = (await details()).items()  # the stored ones are cleared, the failed one kept
    async with engine.connect() as conn:
        error = (await conn.execute(select(JobDetail.error))).scalar_one()
    assert status == "failed" and "404" in (error or ""), error
    job = await get_job(engine, shown.id)
    assert job.status == "succeeded" and job.details_failed == 1 and "404" in job.detail_errors[0]
    stored = await items(engine)
    assert sorted(f.get("salary", "-") for f in stored.values()) == ["-", "salary of go-0", "salary of go-1"]


async def test_a_stop_gives_back_a_job_that_waits_on_its_detail_pages(
    engine: AsyncEngine, board: Board, tmp_path: Path
) -> None:
    """Stopped while its job's listing is done and its detail pages are held at the server: the
    worker waits ``shutdown_timeout`` for it, then stops (the wait for detail pages does not outlive
    the drain) and gives the delivery back; the run is not succeeded."""
    from crawlherd.dispatch.dispatch_service import DispatchService

    board.hold = asyncio.Event()  # never set: the detail pages hang
    await load(engine, tmp_path, website(board, robots="ignore"), ["wait"], due=True)
    limits = FetchLimits(allow_private_addresses=True)

    async def listed_and_held() -> bool:
        async with engine.connect() as conn:
            run = (await conn.execute(select(JobRun.listed_at))).first()
        return run is not None and run.listed_at is not None and len(board.fetched("/jobs/")) == 3

    async with open_broker(str(engine.url)) as broker:
        options = WorkerOptions(limits=limits, poll_interval=0.05, backoff=0.1, shutdown_timeout=0.5)
        worker = Worker(engine, broker, options)
        await DispatchService(engine, broker).run_once()
        stop = asyncio.Event()
        async with worker:
            task = asyncio.create_task(worker.run(stop))
            await wait_until(listed_and_held, deadline=20)
            stop.set()
            done, _ = await asyncio.wait({task}, timeout=20)
            assert done, "the worker did not stop: its job's wait for detail pages outlived the drain"
            stats = task.result()
        assert stats.requeued == 1 and stats.succeeded == 0
        assert await broker.pending() == 1  # given back: another worker takes it
    assert [r[0] for r in await runs(engine)] == ["running"]
# -- counters ------------------------------------------------------------------------------------


async def test_an_attempt_that_fails_after_storing_items_counts_them_once(board: Board, engine: AsyncEngine,
                                                                          tmp_path: Path) -> None:
    """Page 1 stores three new items, page 2 answers 500 every time: both attempts fail. The items are
    counted once -- by the attempt that stored them -- alike in the worker's counters, the attempts'
    rows and the console's 24-hour totals (they used to be counted nowhere: only a success counted)."""
    board.failing_pages = {"2"}
    paged = {"pagination": {"type": "page_param", "param": "page", "start": 1, "max_pages": 2}}
    await load(engine, tmp_path, website(board, robots="ignore", **paged), ["rust"], due=True)
    worker = await run_until_idle(engine, tmp_path, max_attempts=2)

    assert [status for status, _, _ in await runs(engine)] == ["dead"]
    stored = await items(engine)
    assert len(stored) == 3
    async with engine.connect() as conn:
        attempts = (await conn.execute(
            select(JobAttempt.attempt, JobAttempt.pages, JobAttempt.items_new, JobAttempt.items_updated)
            .order_by(JobAttempt.attempt))).all()
    assert [(a.attempt, a.pages, a.items_new) for a in attempts] == [(1, 1, 3), (2, 1, 0)]
    assert (worker.stats.pages, worker.stats.items_new) == (2, 3)
    assert worker.stats.items_updated == sum(a.items_updated for a in attempts)
    totals = await overview(engine)
    assert (totals.items_new_last_day, totals.items_updated_last_day) == (3, worker.stats.items_updated)


async def test_a_frontier_outage_mid_listing_strands_no_detail_rows(
    board: Board, engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second slot of a target reads the same listing: its detail pages are duplicates of the first
    slot's (queued in the revisit period). The frontier fails once as the listing page queues them
    (setting the detail host's politeness): the page goes back and is read again -- and the job
    succeeds at once, its detail rows settled, none left "out" for ``details_stall`` with no page
    behind it (a Redis restarted under two workers held a job so for 900 s)."""
    from crawlherd.errors import BackendUnavailableError
    from crawlherd.worker.pages import PagePipeline

    frontier = f"sqlite:///{tmp_path / 'frontier.db'}"  # shared by both runs: the revisit period holds
    await load(engine, tmp_path, website(board, robots="ignore"), ["go"], due=True)
    await run_until_idle(engine, tmp_path, frontier_url=frontier)
    assert [r[0] for r in await runs(engine)] == ["succeeded"]

    original = PagePipeline._politeness
    failed: list[str] = []
    read: list[str] = []

    async def once(self: PagePipeline, site: Any, host: str, url: str, *, raise_only: bool = False) -> None:
        if raise_only:  # the listing page read: its own host's delay, raised by robots.txt only
            read.append(url)
        elif read and not failed:  # then the detail hosts', as the listing page queues their pages
            failed.append(host)
            raise BackendUnavailableError("the frontier went away (injected)", role="frontier")
        await original(self, site, host, url, raise_only=raise_only)

    monkeypatch.setattr(PagePipeline, "_politeness", once)
    async with engine.begin() as conn:  # the next slot, due now
        await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC) + timedelta(seconds=1)))
    await asyncio.sleep(1.1)
    # details_stall=5: a row stranded as it was would fail with that reason after 5 s (not hold for 900)
    await run_until_idle(engine, tmp_path, frontier_url=frontier, details_stall=5)
    assert failed, "the outage was not injected"
    assert [r[0] for r in await runs(engine)] == ["succeeded", "succeeded"]
    async with engine.connect() as conn:
        left = (await conn.execute(select(JobDetail.slot_at, JobDetail.status, JobDetail.error))).all()
    assert left == [], left


async def test_a_job_calling_a_closed_page_pipeline_meets_an_outage(engine: AsyncEngine) -> None:
    """A stop aborted by a second Ctrl+C closes the page pipeline under jobs still running: their calls
    (the first listing page, the marker) are a frontier outage -- the job goes back to the broker --
    not an AssertionError logged with a traceback as an unexpected failure."""
    from crawlherd.errors import BackendUnavailableError
    from crawlherd.request import Request
    from crawlherd.sitespec import SiteSpec
    from crawlherd.worker.jobcrawl import marker_request

    async with open_broker(str(engine.url)) as broker:
        worker = Worker(engine, broker, WorkerOptions(limits=FetchLimits(allow_private_addresses=True)))
        async with worker:
            await worker.pages.close()
            with pytest.raises(BackendUnavailableError, match="frontier is closed") as marked:
                await worker.pages.mark(marker_request("r1"))
            site = SiteSpec.model_validate(website(Board(url="http://127.0.0.1:9"), robots="ignore"))
            with pytest.raises(BackendUnavailableError, match="frontier is closed"):
                await worker.pages.queue_listing(site, Request("http://127.0.0.1:9/search?q=x"))
    assert marked.value.role == "frontier"
