"""The items sink on SQLite and PostgreSQL: one row per item; fields merged in the database, so
concurrent writers (a listing and a detail page of one item) never lose each other's fields."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db import StoredItem, Website, create_engine, upgrade
from crawlherd.extract.rules import make_item
from crawlherd.sinks import SQLItemSink
from tests.support.db import fresh_postgres_database


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'items.db'}"
        return
    with fresh_postgres_database(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await upgrade(engine)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(
            insert(Website).values(
                id=1,
                name="shop",
                spec={"name": "shop", "base_url": "https://shop.test", "search_url_template": "https://shop.test/?q={keywords}"},
                created_at=now,
                updated_at=now,
            )
        )
    yield engine
    await engine.dispose()


async def test_upsert_counts_and_merges(engine: AsyncEngine) -> None:
    sink = SQLItemSink(engine)
    now = datetime.now(UTC)
    a = make_item("shop", "https://shop.test/a", {"title": "A", "price": "1"})
    b = make_item("shop", "https://shop.test/b", {"title": "B"})
    first = await sink.upsert([a, b, a], website_id=1, target_id=None, seen_at=now)
    assert (first.new, first.updated) == (2, 0)
    again = await sink.upsert([a], website_id=1, target_id=None, seen_at=now)
    assert (again.new, again.updated) == (0, 0)
    changed = make_item("shop", "https://shop.test/a", {"price": "2", "stock": "3"})
    third = await sink.upsert([changed], website_id=1, target_id=None, seen_at=now)
    assert (third.new, third.updated) == (0, 1)
    async with engine.connect() as conn:
        rows = (await conn.execute(select(func.count()).select_from(StoredItem))).scalar_one()
        data = (await conn.execute(select(StoredItem.data).where(StoredItem.url == "https://shop.test/a"))).scalar_one()
    assert rows == 2
    assert data == {"title": "A", "price": "2", "stock": "3"}


class _StaleReader(SQLItemSink):
    """Reads the stored fields, then waits at ``gate`` before writing: another writer commits between."""

    def __init__(self, engine: AsyncEngine, gate: asyncio.Event, reading: asyncio.Event) -> None:
        super().__init__(engine)
        self.gate, self.reading = gate, reading

    async def _stored(self, conn: AsyncConnection, fingerprints: list[str]) -> dict[str, dict[str, Any]]:
        stored = await super()._stored(conn, fingerprints)
        self.reading.set()
        await self.gate.wait()
        return stored


async def test_a_writer_with_a_stale_read_keeps_the_other_writers_fields(
    engine: AsyncEngine, database_url: str
) -> None:
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite serialises writers (BEGIN IMMEDIATE): the interleaving cannot happen there")
    now = datetime.now(UTC)
    url = "https://shop.test/x"
    await SQLItemSink(engine).upsert(
        [make_item("shop", url, {"title": "X"})], website_id=1, target_id=None, seen_at=now
    )
    gate, reading = asyncio.Event(), asyncio.Event()
    listing = asyncio.create_task(
        _StaleReader(engine, gate, reading).upsert(
            [make_item("shop", url, {"title": "X2"})], website_id=1, target_id=None, seen_at=now
        )
    )
    await reading.wait()  # the listing writer has read the row (no description yet) ...
    await SQLItemSink(engine).upsert(
        [make_item("shop", url, {"description": "long"})], website_id=1, target_id=None, seen_at=now
    )  # ... the detail writer commits ...
    gate.set()  # ... then the listing writer writes.
    await listing
    async with engine.connect() as conn:
        data = (await conn.execute(select(StoredItem.data).where(StoredItem.url == url))).scalar_one()
    assert data == {"title": "X2", "description": "long"}
