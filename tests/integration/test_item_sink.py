"""The SQL sink on PostgreSQL: fields are merged in the database, and the rows a counted write reads are
locked until it commits, so a writer storing the same item meanwhile waits -- no field is lost and one
change counts once. (What every sink does is asserted by the sink contract suite,
``tests/contract/test_sink_contract.py``; SQLite serialises writers with its write lock.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db import StoredItem
from crawlherd.item import make_item
from crawlherd.sinks import SQLSink
from tests.support.db import add_website, open_engine

pytestmark = pytest.mark.postgres
WEBSITE_ID = 1


@pytest.fixture
async def engine(postgres_db_url: str) -> AsyncIterator[AsyncEngine]:
    async for engine in open_engine(postgres_db_url):
        assert await add_website(engine, "shop") == WEBSITE_ID  # an empty database
        yield engine


class _SlowReader(SQLSink):
    """Reads the stored fields, then waits at ``gate`` before writing."""

    def __init__(self, engine: AsyncEngine, gate: asyncio.Event, reading: asyncio.Event) -> None:
        super().__init__(engine)
        self.gate, self.reading = gate, reading

    async def _stored(self, conn: AsyncConnection, fingerprints: list[str]) -> dict[str, dict[str, Any]]:
        stored = await super()._stored(conn, fingerprints)
        self.reading.set()
        await self.gate.wait()
        return stored


async def test_a_writer_storing_an_item_another_has_read_waits_and_both_fields_stay(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    url = "https://shop.test/x"
    await SQLSink(engine).upsert([make_item("shop", url, {"title": "X"})], website_id=WEBSITE_ID, target_id=None,
                                 seen_at=now)
    gate, reading = asyncio.Event(), asyncio.Event()
    listing = asyncio.create_task(
        _SlowReader(engine, gate, reading).upsert(
            [make_item("shop", url, {"title": "X2"})], website_id=WEBSITE_ID, target_id=None, seen_at=now
        )
    )
    await reading.wait()  # the listing writer has read the row (no description yet) ...
    detail = asyncio.create_task(SQLSink(engine).upsert(
        [make_item("shop", url, {"description": "long"})], website_id=WEBSITE_ID, target_id=None, seen_at=now
    ))
    await asyncio.sleep(0.3)
    assert not detail.done()  # ... the detail writer waits for the row it read (it would have read it stale) ...
    gate.set()  # ... until the listing writer has written.
    assert ((await listing).updated, (await detail).updated) == (1, 1)
    async with engine.connect() as conn:
        data = (await conn.execute(select(StoredItem.data).where(StoredItem.url == url))).scalar_one()
    assert data == {"title": "X2", "description": "long"}


# -- several pages' items in one write (the worker's grouped writes) ---------------------------------


async def test_upsert_groups_counts_each_group_in_order_in_one_write(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    a, b = "https://shop.test/a", "https://shop.test/b"
    counts = await SQLSink(engine).upsert_groups(
        [
            ([make_item("shop", a, {"title": "A"})], WEBSITE_ID, None),
            ([make_item("shop", a, {"title": "A"}), make_item("shop", b, {"title": "B"})], WEBSITE_ID, None),
            ([make_item("shop", a, {"salary": "1"})], WEBSITE_ID, None),
        ],
        seen_at=now,
    )
    # a is new in the first group, unchanged in the second, updated (a new field) in the third
    assert [(c.new, c.updated) for c in counts] == [(1, 0), (1, 0), (0, 1)]
    async with engine.connect() as conn:
        rows = dict((await conn.execute(select(StoredItem.url, StoredItem.data))).all())
    assert rows == {a: {"title": "A", "salary": "1"}, b: {"title": "B"}}


async def test_grouped_writes_give_each_page_its_counts_and_share_writes(engine: AsyncEngine) -> None:
    from crawlherd.worker.grouped import GroupedWrites

    writes = GroupedWrites(SQLSink(engine))
    pages = [[make_item("shop", f"https://shop.test/{i}", {"n": i})] for i in range(40)]
    counts = await asyncio.gather(*(writes.store(p, website_id=WEBSITE_ID, target_id=None) for p in pages))
    assert [(c.new, c.updated) for c in counts] == [(1, 0)] * 40
    assert writes.calls == 40 and writes.writes < 40  # pages that came while a write ran went in the next
    again = await writes.store(pages[0], website_id=WEBSITE_ID, target_id=None)
    assert (again.new, again.updated) == (0, 0)
    async with engine.connect() as conn:
        assert len((await conn.execute(select(StoredItem.url))).all()) == 40
    await writes.close()


async def test_a_failed_grouped_write_fails_every_page_in_it(engine: AsyncEngine) -> None:
    from crawlherd.worker.grouped import GroupedWrites

    writes = GroupedWrites(SQLSink(engine))
    good = [make_item("shop", "https://shop.test/ok", {"n": 1})]
    bad = [make_item("shop", "https://shop.test/bad", {"n": {1, 2}})]  # a set: not JSON, the write fails
    results = await asyncio.gather(
        writes.store(good, website_id=WEBSITE_ID, target_id=None),
        writes.store(bad, website_id=WEBSITE_ID, target_id=None),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) for r in results), results
    async with engine.connect() as conn:
        assert (await conn.execute(select(StoredItem.url))).all() == []  # nothing half-written
    # the next write is a new one and succeeds
    counts = await writes.store(good, website_id=WEBSITE_ID, target_id=None)
    assert (counts.new, counts.updated) == (1, 0)


async def test_a_page_cancelled_while_waiting_does_not_stop_the_write(engine: AsyncEngine) -> None:
    from crawlherd.worker.grouped import GroupedWrites

    writes = GroupedWrites(SQLSink(engine))
    first = asyncio.create_task(
        writes.store([make_item("shop", "https://shop.test/1", {})], website_id=WEBSITE_ID, target_id=None)
    )
    second = asyncio.create_task(
        writes.store([make_item("shop", "https://shop.test/2", {})], website_id=WEBSITE_ID, target_id=None)
    )
    await asyncio.sleep(0)  # both queued; the first write has begun
    second.cancel()
    await first
    with pytest.raises(asyncio.CancelledError):
        await second
    await writes.close()
    async with engine.connect() as conn:
        urls = {u for (u,) in (await conn.execute(select(StoredItem.url))).all()}
    assert "https://shop.test/1" in urls  # the second one may or may not have been written: idempotent
