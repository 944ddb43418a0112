"""The frontier backend fixture: every contract test runs against every backend.

A backend joins the suite by adding a ``_open_<name>`` factory and its name to ``BACKENDS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from crawlherd.clock import FakeClock
from crawlherd.frontier import Frontier, open_scheduler

OpenFrontier = Callable[..., Awaitable[Frontier]]

BACKENDS = ["memory", "sqlite", "redis", "redis-cluster"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def open_frontier(
    backend: str, clock: FakeClock, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[OpenFrontier]:
    """``await open_frontier(**options)`` -> an entered Frontier on the fake clock; closed after the
    test, and checked to have released what it opened."""
    opened: list[Frontier] = []
    redis_prefixes: list[tuple[str, str]] = []

    async def make(**options: Any) -> Frontier:
        options.setdefault("clock", clock)
        if backend == "memory":
            url = "memory://"
        elif backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'frontier.db'}"
        elif backend == "redis":
            redis_url = request.getfixturevalue("redis_url")
            prefix = request.getfixturevalue("unique_name")
            url = f"{redis_url}?prefix={prefix}"
            redis_prefixes.append((redis_url, prefix))
        elif backend == "redis-cluster":
            url = f"{request.getfixturevalue('redis_cluster_url')}?prefix={request.getfixturevalue('unique_name')}"
        else:  # pragma: no cover - a typo in BACKENDS
            raise AssertionError(backend)
        frontier = await open_scheduler(url, **options).__aenter__()
        opened.append(frontier)
        return frontier

    yield make
    for frontier in opened:
        await frontier.close()
        await frontier.close()  # idempotent
    for redis_url, prefix in redis_prefixes:
        await _delete_prefix(redis_url, prefix)


async def _delete_prefix(redis_url: str, prefix: str) -> None:
    """The test's keys go away with it (the Redis server is shared)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.unlink(*keys)
    finally:
        await client.aclose()
