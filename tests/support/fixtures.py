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

__all__ = ["BROKERS", "ON_POSTGRES", "broker_url", "config_db", "engine", "scratch_broker"]

#: Every broker kind of the package, the service ones marked (skipped loudly when the service is missing).
BROKERS = [
    "memory",
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("amqp", marks=pytest.mark.rabbitmq),
]


#: Put on a test module for an ``engine`` on PostgreSQL instead of SQLite.
ON_POSTGRES = pytest.mark.parametrize("config_db", ["postgres"], indirect=True)


@pytest.fixture
def config_db(request: pytest.FixtureRequest) -> str:
    """The URL of a migrated config DB of the test's own: a SQLite file, or (:data:`ON_POSTGRES`) a
    PostgreSQL database."""
    on_postgres = getattr(request, "param", "sqlite") == "postgres"
    return str(request.getfixturevalue("postgres_db_url" if on_postgres else "sqlite_db_url"))


@pytest.fixture
async def engine(config_db: str) -> AsyncIterator[AsyncEngine]:
    """An engine on :func:`config_db`."""
    async for engine in open_engine(config_db):
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
