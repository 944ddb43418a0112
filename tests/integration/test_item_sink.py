"""The SQL sink on PostgreSQL: fields are merged in the database, so a writer that read the row before
another writer committed never loses that writer's fields. (What every sink does is asserted by the sink
contract suite, ``tests/contract/test_sink_contract.py``; SQLite serialises writers with ``BEGIN
IMMEDIATE``, so this interleaving cannot happen there.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.db import StoredItem, create_engine, upgrade
from crawlherd.item import make_item
from crawlherd.sinks import SQLSink
from tests.support.db import add_website, fresh_postgres_database

pytestmark = pytest.mark.postgres
WEBSITE_ID = 1


@pytest.fixture
def database_url(postgres_url: str) -> Iterator[str]:
    with fresh_postgres_database(postgres_url) as url:
        yield url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await upgrade(engine)
    assert await add_website(engine, "shop") == WEBSITE_ID  # a fresh database
    yield engine
    await engine.dispose()


class _StaleReader(SQLSink):
    """Reads the stored fields, then waits at ``gate`` before writing: another writer commits between."""

    def __init__(self, engine: AsyncEngine, gate: asyncio.Event, reading: asyncio.Event) -> None:
        super().__init__(engine)
        self.gate, self.reading = gate, reading

    async def _stored(self, conn: AsyncConnection, fingerprints: list[str]) -> dict[str, dict[str, Any]]:
        stored = await super()._stored(conn, fingerprints)
        self.reading.set()
        await self.gate.wait()
        return stored


async def test_a_writer_with_a_stale_read_keeps_the_other_writers_fields(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    url = "https://shop.test/x"
    await SQLSink(engine).upsert([make_item("shop", url, {"title": "X"})], website_id=WEBSITE_ID, target_id=None,
                                 seen_at=now)
    gate, reading = asyncio.Event(), asyncio.Event()
    listing = asyncio.create_task(
        _StaleReader(engine, gate, reading).upsert(
            [make_item("shop", url, {"title": "X2"})], website_id=WEBSITE_ID, target_id=None, seen_at=now
        )
    )
    await reading.wait()  # the listing writer has read the row (no description yet) ...
    await SQLSink(engine).upsert(
        [make_item("shop", url, {"description": "long"})], website_id=WEBSITE_ID, target_id=None, seen_at=now
    )  # ... the detail writer commits ...
    gate.set()  # ... then the listing writer writes.
    await listing
    async with engine.connect() as conn:
        data = (await conn.execute(select(StoredItem.data).where(StoredItem.url == url))).scalar_one()
    assert data == {"title": "X2", "description": "long"}
