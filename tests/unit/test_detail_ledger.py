"""The detail ledger wakes a job's owner when the last of its run's pages known in this process is
settled, rather than at its next poll; the table stays what decides (a SQLite config DB)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from crawlherd.db import ScrapeTarget, create_engine, upgrade
from crawlherd.demo.targets import demo_targets, targets_toml
from crawlherd.dispatch.targets import import_targets
from crawlherd.messages import JobMessage, idempotency_key
from crawlherd.sitespec import SiteSpec
from crawlherd.worker.details import DetailLedger

HOUR = 3600.0  # a poll that would outlast the test: only the wake can end the wait


async def _ledger_and_job(tmp_path: Path, url: str | None = None) -> tuple[DetailLedger, JobMessage]:
    engine = create_engine(url or f"sqlite:///{tmp_path / 'config.db'}")
    await upgrade(engine)
    document = demo_targets("http://x")
    path = tmp_path / "targets.toml"
    path.write_text(targets_toml(document))
    await import_targets(engine, path)
    async with engine.connect() as conn:
        target_id = (await conn.execute(select(ScrapeTarget.id).limit(1))).scalar_one()
    now = datetime.now(UTC)
    job = JobMessage(job_id=str(uuid.uuid4()), idempotency_key=idempotency_key(target_id, now), target_id=target_id,
                     slot_at=now, website_id=1, site=SiteSpec.model_validate(document["websites"][1]),
                     search_url="http://x/browse/a/b", keywords_used="a", created_at=now)
    return DetailLedger(engine), job


async def test_the_last_settle_here_wakes_the_owner_and_the_table_agrees(tmp_path: Path) -> None:
    ledger, job = await _ledger_and_job(tmp_path)
    run = (job.target_id, job.slot_at)
    try:
        assert await ledger.expect(run, ["a", "b"]) == {"a", "b"}
        owner = asyncio.create_task(ledger.wait(job, HOUR))
        await ledger.settle("a")
        for _ in range(5):
            await asyncio.sleep(0)
        assert not owner.done() and await ledger.out(job) == 1  # one page still out: no wake
        await ledger.settle("b", "failed for good")
        await asyncio.wait_for(owner, 30)  # woken by the settle, an hour before its poll
        assert await ledger.out(job) == 0
        # woken while the owner was not waiting: its next wait returns at once
        assert await ledger.expect(run, ["c"]) == {"c"}
        await ledger.settle("c")
        await asyncio.wait_for(ledger.wait(job, HOUR), 30)
    finally:
        await ledger.close()
        await ledger.engine.dispose()


async def test_a_page_not_queued_after_all_is_not_waited_for_here(tmp_path: Path) -> None:
    ledger, job = await _ledger_and_job(tmp_path)
    run = (job.target_id, job.slot_at)
    try:
        await ledger.expect(run, ["a", "b"])
        await ledger.settle("a")
        owner = asyncio.create_task(ledger.wait(job, HOUR))
        await ledger.forget(run, ["b"])  # the frontier refused its page: not this run's to wait for
        await asyncio.wait_for(owner, 30)
        assert await ledger.out(job) == 0
        ledger.forget_run(job)
        assert not ledger._waiting and not ledger._items and not ledger._ready  # nothing kept for the run
    finally:
        await ledger.close()
        await ledger.engine.dispose()


async def test_a_detail_page_is_stored_and_settled_in_one_write(tmp_path: Path) -> None:
    from crawlherd.db import StoredItem
    from crawlherd.item import make_item
    from crawlherd.sinks import SQLSink
    from crawlherd.worker.grouped import GroupedWrites

    ledger, job = await _ledger_and_job(tmp_path)
    writes = GroupedWrites(SQLSink(ledger.engine), ledger=ledger)
    run = (job.target_id, job.slot_at)
    good = make_item("shop", "https://shop.test/ok", {"title": "OK"})
    bad = make_item("shop", "https://shop.test/bad", {"n": {1, 2}})  # a set: not JSON, its write fails
    try:
        await ledger.expect(run, [good.fingerprint.hex(), bad.fingerprint.hex()])
        owner = asyncio.create_task(ledger.wait(job, HOUR))
        await writes.store(
            [make_item("shop", "https://shop.test/ok", {"title": "OK", "salary": "1"})], website_id=1,
            target_id=job.target_id,
        )
        await writes.store_detail(good, website_id=1, target_id=job.target_id)
        assert await ledger.out(job) == 1 and not owner.done()
        failed = await asyncio.gather(writes.store_detail(bad, website_id=1, target_id=job.target_id),
                                      return_exceptions=True)
        assert isinstance(failed[0], Exception)
        assert await ledger.out(job) == 1  # not stored, not settled: its page is fetched again
        async with ledger.engine.connect() as conn:
            rows = dict((await conn.execute(select(StoredItem.url, StoredItem.data))).all())
        assert rows == {"https://shop.test/ok": {"title": "OK", "salary": "1"}}  # merged over the listing's
        await writes.store_detail(make_item("shop", "https://shop.test/bad", {"n": 2}), website_id=1,
                                  target_id=job.target_id)
        await asyncio.wait_for(owner, 30)  # the last settle here woke the owner
        assert await ledger.out(job) == 0
    finally:
        await writes.close()
        await ledger.close()
        await ledger.engine.dispose()


async def test_the_owners_counts_asked_together_are_one_query_each_its_runs(tmp_path: Path) -> None:
    """Owners that poll at the same moment are answered by one query, each with its own run's count (another
    slot of the same target, or a run with nothing out, is not mixed in)."""
    ledger, job = await _ledger_and_job(tmp_path)
    later = job.model_copy(update={"slot_at": datetime(2030, 1, 1, tzinfo=UTC)})
    other = job.model_copy(update={"target_id": job.target_id + 1000})
    try:
        await ledger.expect((job.target_id, job.slot_at), ["a", "b", "c"])
        await ledger.expect((later.target_id, later.slot_at), ["d"])
        await ledger.settle("b")
        counts = await asyncio.gather(*(ledger.out(j) for j in (job, later, other, job)))
        assert counts == [2, 1, 0, 2]
        assert ledger._outs is not None and ledger._outs.batches == 1
    finally:
        await ledger.close()
        await ledger.engine.dispose()


async def test_listing_pages_store_items_and_detail_rows_in_one_write(tmp_path: Path) -> None:
    """Listing pages written together: one write for their items and their detail rows; each page gets its
    items' counts and the rows new for it -- an item two pages of one run expect is new for the first only,
    a row already there for none -- and a row forgotten is gone."""
    from crawlherd.item import make_item
    from crawlherd.sinks import SQLSink
    from crawlherd.worker.grouped import GroupedWrites

    ledger, job = await _ledger_and_job(tmp_path)
    writes = GroupedWrites(SQLSink(ledger.engine), ledger=ledger)
    run = (job.target_id, job.slot_at)
    later = (job.target_id, datetime(2030, 1, 1, tzinfo=UTC))
    a, b = make_item("shop", "https://shop.test/a", {"t": "A"}), make_item("shop", "https://shop.test/b", {"t": "B"})
    try:
        await ledger.expect(run, ["held"])
        first, second, third = await asyncio.gather(
            writes.store_listing([a], website_id=1, target_id=job.target_id, run=run, details=["x", "held"]),
            writes.store_listing([a, b], website_id=1, target_id=job.target_id, run=run, details=["x", "y"]),
            writes.store_listing([], website_id=1, target_id=job.target_id, run=later, details=["x"]),
        )
        assert writes._listings is not None and writes._listings.batches <= 2
        assert (first[0].new, first[1]) == (1, {"x"})
        assert (second[0].new, second[0].updated, second[1]) == (1, 0, {"y"})
        assert third[1] == {"x"}  # another run's row of the same item
        assert await ledger.out(job) == 3  # held, x, y
        await ledger.forget(run, ["y"])
        assert await ledger.out(job) == 2
    finally:
        await writes.close()
        await ledger.close()
        await ledger.engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'config.db'}"
    return str(request.getfixturevalue("postgres_db_url"))


async def test_two_workers_writing_one_runs_rows_in_opposite_orders_do_not_deadlock(
    tmp_path: Path, db_url: str
) -> None:
    """Two workers (two ledgers, two engines) expect and settle the same rows at once, in opposite
    orders: PostgreSQL fails one of two transactions that lock shared rows in opposite orders, unless
    every writer takes them in one order."""
    one, job = await _ledger_and_job(tmp_path, db_url)
    two = DetailLedger(create_engine(db_url))
    run = (job.target_id, job.slot_at)
    items = [f"{i:064x}" for i in range(300)]
    try:
        for _ in range(3):
            new_one, new_two = await asyncio.gather(one.expect(run, items), two.expect(run, items[::-1]))
            await asyncio.gather(*(one.settle(i) for i in items), *(two.settle(i) for i in items[::-1]))
            assert await one.out(job) == 0
            assert new_one | new_two <= set(items)
            await one.done(job)  # the stored rows go: the next round writes them again
    finally:
        for ledger in (one, two):
            await ledger.close()
            await ledger.engine.dispose()
