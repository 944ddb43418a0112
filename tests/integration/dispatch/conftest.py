"""Config DB fixtures: the same tests on a real SQLite file and a real PostgreSQL database (a fresh
database per test module, emptied per test: ``tests/support/db.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.db import DB_KINDS, migrated_db_url, open_engine


@pytest.fixture(params=DB_KINDS)
def db_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty config DB: a SQLite file, or the module's PostgreSQL database emptied (a module
    parametrizes it indirectly for one of them)."""
    return migrated_db_url(request)


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    async for engine in open_engine(db_url):
        yield engine
