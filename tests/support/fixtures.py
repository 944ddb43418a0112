"""Fixtures shared by the worker and fault tests: a migrated SQLite config DB (``engine``, offered to
every integration test by ``tests/integration/conftest.py``) and a scratch queue on each broker
(``broker_url``: import it into a test module, ``from tests.support.fixtures import broker_url  # noqa:
F401``; :func:`scratch_broker` for a fixture of one's own with options per kind)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.db import open_engine
from tests.support.real_brokers import remove, scratch_url

__all__ = ["BROKERS", "broker_url", "engine", "scratch_broker"]

#: Every broker kind of the package, the service ones marked (skipped loudly when the service is missing).
BROKERS = [
    "memory",
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("amqp", marks=pytest.mark.rabbitmq),
]


@pytest.fixture
async def engine(sqlite_db_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated config DB in a SQLite file of the test's own."""
    async for engine in open_engine(sqlite_db_url):
        yield engine


async def scratch_broker(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str,
                         options: dict[str, str] | None = None) -> AsyncIterator[str]:
    """The body of a broker-URL fixture parametrized by kind (``request.param``): a scratch queue
    named ``unique_name`` with ``options[kind]`` appended to its URL, removed afterwards."""
    kind = request.param
    extra = (options or {}).get(kind, "")
    if kind == "memory":
        yield f"memory://{unique_name}" + (f"?{extra.lstrip('&')}" if extra else "")
        return
    redis_url = request.getfixturevalue("redis_url") if kind == "redis" else ""
    amqp_url = request.getfixturevalue("amqp_url") if kind == "amqp" else ""
    url = scratch_url(kind, unique_name, sqlite_path=str(tmp_path / "broker.db"), redis_url=redis_url,
                      amqp_url=amqp_url)
    try:
        yield url + extra
    finally:
        await remove(url, kind, unique_name)


@pytest.fixture(params=BROKERS)
async def broker_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> AsyncIterator[str]:
    """A scratch queue on each broker."""
    async for url in scratch_broker(request, tmp_path, unique_name):
        yield url
