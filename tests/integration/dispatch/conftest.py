"""Config DB fixtures: the same tests on a real SQLite file and a real PostgreSQL database (a fresh
database per test module, created and dropped)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import create_engine, upgrade
from tests.support.db import fresh_postgres_database

TABLES = "items, job_runs, dispatch_outbox, scrape_targets, websites"


@pytest.fixture(scope="module")
def pg_database(postgres_url: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test module."""
    with fresh_postgres_database(postgres_url) as url:
        asyncio.run(upgrade(url))
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty config DB: a SQLite file, or the module's PostgreSQL database truncated."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/config.db"
        asyncio.run(upgrade(url))
        return url
    url: str = request.getfixturevalue("pg_database")

    async def truncate() -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE"))
                await conn.execute(text("DROP TABLE IF EXISTS test_publishes"))
        finally:
            await engine.dispose()

    asyncio.run(truncate())
    return url


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(db_url)
    yield engine
    await engine.dispose()
