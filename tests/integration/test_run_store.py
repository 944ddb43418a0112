"""``RunStore.start``: the run key's check and the start are one statement -- a run that already
succeeded (or is dead) is not started again and its status comes back; any other is (re)started, with
one ``job_attempts`` row per attempt. On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import JobRun
from crawlherd.db.models import JobAttempt
from crawlherd.errors import PermanentJobError
from crawlherd.messages import JobMessage, idempotency_key
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.jobcrawl import ListingOutcome
from crawlherd.worker.runs import RunStore
from tests.support.db import add_targets, add_website, open_engine

SLOT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def engine(config_db_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated config DB of the test's own, SQLite and PostgreSQL."""
    async for engine in open_engine(config_db_url):
        yield engine


async def _targets(engine: AsyncEngine, n: int) -> list[int]:
    """``n`` targets of one website, every hour."""
    return list(await add_targets(engine, await add_website(engine), n, every=timedelta(hours=1)))


def _job(target_id: int, slot_at: datetime, attempt: int = 0) -> JobMessage:
    site = SiteSpec.model_validate({
        "name": "site", "base_url": "https://jobs.example.com",
        "search_url_template": "https://jobs.example.com/search?q={keywords}",
        "extraction": {"item_selector": "article"},
    })
    return JobMessage(job_id=str(uuid.uuid4()), idempotency_key=idempotency_key(target_id, slot_at),
                      target_id=target_id, slot_at=slot_at, website_id=1, site=site,
                      search_url="https://jobs.example.com/search?q=a", keywords_used="a",
                      created_at=slot_at, attempt_count=attempt)


async def test_start_skips_a_finished_run_and_restarts_any_other(engine: AsyncEngine) -> None:
    target, dead_target = await _targets(engine, 2)
    slot = SLOT
    runs = RunStore(engine)
    assert await runs.start(_job(target, slot), worker="w1") is None  # started
    await runs.finish(_job(target, slot), status="failed", error="boom")
    assert await runs.start(_job(target, slot, attempt=1), worker="w2") is None  # a failed run is retried
    await runs.finish(_job(target, slot, attempt=1), status="succeeded", pages=3)
    assert await runs.start(_job(target, slot, attempt=2), worker="w3") == "succeeded"  # the run key
    assert await runs.start(_job(target, slot + timedelta(hours=1)), worker="w3") is None  # another slot
    assert await runs.start(_job(dead_target, slot), worker="w1") is None
    await runs.finish(_job(dead_target, slot), status="dead", error="gone")
    assert await runs.start(_job(dead_target, slot, attempt=1), worker="w2") == "dead"
    async with engine.connect() as conn:
        run = (await conn.execute(select(JobRun.status, JobRun.worker, JobRun.attempts, JobRun.pages).where(
            JobRun.target_id == target, JobRun.slot_at == slot))).one()
        attempts = (await conn.execute(select(JobAttempt.attempt, JobAttempt.worker, JobAttempt.status).where(
            JobAttempt.target_id == target, JobAttempt.slot_at == slot).order_by(JobAttempt.attempt))).all()
    assert tuple(run) == ("succeeded", "w2", 2, 3)  # left alone by w3
    assert [tuple(a) for a in attempts] == [(1, "w1", "failed"), (2, "w2", "succeeded")]
    with pytest.raises(PermanentJobError, match="no longer exists"):
        await runs.start(_job(10_000, slot), worker="w1")


async def test_finish_changes_only_a_run_the_caller_still_owns(engine: AsyncEngine) -> None:
    """Fencing: w1 started the run and hung; its job was delivered again and w2 started the same attempt
    (taking the run over). w1, resumed, can record nothing over it -- neither while w2 runs it nor
    after w2 finished -- and its poll for the run's outcome says the run was taken over."""
    (target,) = await _targets(engine, 1)
    slot = SLOT
    hung, taker = RunStore(engine), RunStore(engine)
    assert await hung.start(_job(target, slot), worker="w1") is None
    assert await hung.reported(_job(target, slot), worker="w1") is None  # running, its own
    assert await taker.start(_job(target, slot), worker="w2") is None  # the same attempt, delivered again
    lost = await hung.reported(_job(target, slot), worker="w1")
    assert lost is not None and lost.error == "the run was taken over by worker w2"
    assert not await hung.finish(_job(target, slot), status="failed", error="read timeout")
    assert await taker.finish(_job(target, slot), status="succeeded", pages=5, items_new=50)
    assert not await hung.finish(_job(target, slot), status="failed", error="read timeout")
    assert not await RunStore(engine).finish(_job(target, slot), status="dead")  # started none
    async with engine.connect() as conn:
        run = (await conn.execute(select(JobRun.status, JobRun.worker, JobRun.pages, JobRun.error).where(
            JobRun.target_id == target, JobRun.slot_at == slot))).one()
        attempt = (await conn.execute(select(JobAttempt.worker, JobAttempt.status).where(
            JobAttempt.target_id == target, JobAttempt.slot_at == slot))).one()
    assert tuple(run) == ("succeeded", "w2", 5, None)
    assert tuple(attempt) == ("w2", "succeeded")


async def test_finish_never_rewrites_a_finished_run_with_another_outcome(engine: AsyncEngine) -> None:
    """Another worker read the last listing page of w1's run and reported it: the run stays running,
    its listing done (``listed_at``), until w1 succeeds it once its detail pages are settled; a stale
    failure afterwards (w1's own copy of the page) leaves it succeeded."""
    (target,) = await _targets(engine, 1)
    slot = SLOT
    runs = RunStore(engine)
    assert await runs.start(_job(target, slot), worker="w1") is None
    await RunStore(engine).report(_job(target, slot), worker="w1", outcome=ListingOutcome(pages=2))
    assert await runs.status(_job(target, slot)) == "running"
    reported = await runs.reported(_job(target, slot), worker="w1")
    assert reported is not None and (reported.error, reported.pages) == (None, 2)
    assert await runs.finish(_job(target, slot), status="succeeded", pages=2)
    assert not await runs.finish(_job(target, slot), status="failed", error="HTTP 404")
    # a listing that ended for good (dead), reported by another worker: the owner's stale success
    # is not written over it (the row is checked, the owner's claim still held)
    dead = _job(target, slot + timedelta(hours=1))
    assert await runs.start(dead, worker="w1") is None
    await RunStore(engine).report(dead, worker="w1", outcome=ListingOutcome(error="robots", permanent=True))
    assert not await runs.finish(dead, status="succeeded", pages=2)
    assert await runs.status(dead) == "dead"
    assert await runs.status(_job(target, slot)) == "succeeded"
    assert await runs.start(_job(target, slot, attempt=1), worker="w1") == "succeeded"
