"""``RunStore.start``: the run key's check and the start are one statement -- a run that already
succeeded (or is dead) is not started again and its status comes back; any other is (re)started, with
one ``job_attempts`` row per attempt. On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from crawlherd.db import JobRun, create_engine, upgrade
from crawlherd.db.models import JobAttempt
from crawlherd.errors import PermanentJobError
from crawlherd.messages import JobMessage, idempotency_key
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.runs import RunStore
from tests.support.db import add_targets, add_website


@pytest.fixture
def db_url(config_db_url: str) -> str:
    return config_db_url


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


async def test_start_skips_a_finished_run_and_restarts_any_other(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        website = await add_website(engine)
        target, dead_target = await add_targets(engine, website, 2, every=timedelta(hours=1))
        slot = datetime(2026, 1, 1, tzinfo=UTC)
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
    finally:
        await engine.dispose()
