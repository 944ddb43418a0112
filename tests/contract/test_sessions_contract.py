"""The sessions store contract: the same tests on every backend (memory, SQLite, Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from crawlherd.sessions import Session, SessionChange, SessionStore, TierRule, open_sessions
from crawlherd.sessions.base import SiteHealth, apply_outcome

STORES = ["memory", "sqlite", "redis", "redis-cluster"]
RULE = TierRule(tiers=3, cool_off=30.0, escalate_after=2, descend_after=3)


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> AsyncIterator[SessionStore]:
    kind = request.param
    if kind == "memory":
        url = "memory://"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'frontier.db'}"
    elif kind == "redis-cluster":
        url = f"{request.getfixturevalue('redis_cluster_url')}?prefix={unique_name}"
    else:
        url = f"{request.getfixturevalue('redis_url')}?prefix={unique_name}"
    async with open_sessions(url) as opened:
        yield opened
    if kind == "redis":  # leave nothing behind
        from redis import asyncio as aioredis

        client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"))
        keys = [k async for k in client.scan_iter(f"{unique_name}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_sessions_are_added_used_updated_and_retired(store: SessionStore) -> None:
    s = Session("s1", "http://p1:3128", headers={"User-Agent": "x"}, created=100.0)
    await store.add("site", s)
    assert await store.sessions("site") == [s]
    assert await store.sessions("other") == []
    used = await store.use("site", "s1")
    assert used is not None and used.uses == 1
    assert (await store.use("site", "s1")).uses == 2  # type: ignore[union-attr]
    cookie = {"name": "sid", "value": "v", "domain": "h", "path": "/"}
    after = await store.update("site", "s1", SessionChange(cookies=[cookie], error=True, login_epoch=2))
    assert after is not None
    assert (after.cookies, after.errors, after.login_epoch, after.uses) == ([cookie], 1, 2, 2)
    emptied = await store.update("site", "s1", SessionChange(cookies=[]))
    assert emptied is not None and emptied.cookies == [] and emptied.headers == {"User-Agent": "x"}
    retired = await store.update("site", "s1", SessionChange(retire="blocked: HTTP 403"))
    assert retired is not None and retired.retired == "blocked: HTTP 403"
    assert await store.use("site", "s1") is None  # a retired session is not used again
    again = await store.update("site", "s1", SessionChange(retire="other"))
    assert again is not None and again.retired == "blocked: HTTP 403"  # the first reason stays
    assert await store.use("site", "nope") is None
    assert await store.update("site", "nope", SessionChange(error=True)) is None
    assert "site" in await store.sites()


async def test_uses_are_atomic(store: SessionStore) -> None:
    await store.add("site", Session("s1", "direct"))
    await asyncio.gather(*(store.use("site", "s1") for _ in range(20)))
    [s] = await store.sessions("site")
    assert s.uses == 20


async def test_outcomes_rest_proxies_and_move_tiers(store: SessionStore) -> None:
    h = await store.record("site", "p1", "blocked", now=1000.0, rule=RULE)
    assert h.tier == 0 and h.proxy("p1").blocks == 1 and h.proxy("p1").rest_until == 1030.0
    assert h.proxy("p1").resting(1029.0) and not h.proxy("p1").resting(1030.0)
    h = await store.record("site", "p2", "blocked", now=1001.0, rule=RULE)
    assert h.tier == 1 and h.blocks_in_row == 0  # two blocks in a row: up one tier
    for _ in range(2):
        h = await store.record("site", "p3", "ok", now=1002.0, rule=RULE)
    h = await store.record("site", "p3", "error", now=1002.0, rule=RULE)
    assert h.tier == 1 and h.successes_in_row == 2  # an error moves nothing
    h = await store.record("site", "p3", "ok", now=1003.0, rule=RULE)
    assert h.tier == 0  # three successes in a row: back down
    stored = await store.health("site")
    assert stored == h
    assert stored.proxy("p3").requests == 4 and stored.proxy("p3").successes == 3
    assert stored.proxy("p1").requests == 1 and stored.proxy("p1").rest_until == 1030.0
    assert await store.health("nothing") == SiteHealth()
    # the tier never goes above the last one, nor below the first
    for i in range(10):
        h = await store.record("site", "p1", "blocked", now=1004.0 + i, rule=RULE)
    assert h.tier == RULE.tiers - 1
    # the Lua and SQL steps are the reference's
    assert apply_outcome(h, "p1", "error", 0.0, RULE).proxy("p1").requests == h.proxy("p1").requests + 1


async def test_claims_and_counts(store: SessionStore) -> None:
    assert await store.claim("login:s1:0", 30.0)
    assert not await store.claim("login:s1:0", 30.0)
    assert await store.claim("login:s1:1", 30.0)
    assert [await store.count("page:x", 60.0) for _ in range(3)] == [1, 2, 3]
    assert await store.count("page:y", 60.0) == 1


async def test_purge_forgets_every_website_and_nothing_of_another_store(
    store: SessionStore, request: pytest.FixtureRequest, unique_name: str
) -> None:
    await store.add("site", Session("s1", "p1"))
    await store.record("other", "p1", "blocked", now=5.0, rule=RULE)
    assert await store.claim("login:s1:0", 30.0)
    await store.count("page:x", 60.0)
    kind = request.node.callspec.params["store"]
    neighbour = None
    if kind == "redis":  # a store under another prefix on the same Redis (a glob character in its name)
        neighbour = open_sessions(f"{request.getfixturevalue('redis_url')}?prefix={unique_name}*x")
        await neighbour.__aenter__()
        await neighbour.add("kept", Session("n1", "p1"))
    try:
        assert await store.purge() == 2
        assert await store.sites() == [] and await store.sessions("site") == []
        assert await store.health("other") == SiteHealth()  # the proxies' rest and the tier: forgotten
        assert await store.claim("login:s1:0", 30.0)  # claims and counters too
        assert await store.count("page:x", 60.0) == 1
        assert await store.purge() == 0
        if neighbour is not None:
            assert [s.id for s in await neighbour.sessions("kept")] == ["n1"]
            await neighbour.purge()
    finally:
        if neighbour is not None:
            await neighbour.__aexit__(None, None, None)


async def test_the_same_store_is_seen_by_a_second_client(
    store: SessionStore, request: pytest.FixtureRequest, tmp_path: Path, unique_name: str
) -> None:
    kind = request.node.callspec.params["store"]
    if kind in ("memory", "redis-cluster"):
        pytest.skip("memory is one process's; the cluster is the redis case on more nodes")
    url = (
        f"sqlite:///{tmp_path / 'frontier.db'}"
        if kind == "sqlite"
        else f"{request.getfixturevalue('redis_url')}?prefix={unique_name}"
    )
    await store.add("site", Session("s1", "p1"))
    await store.record("site", "p1", "blocked", now=5.0, rule=RULE)
    async with open_sessions(url) as other:
        assert [s.id for s in await other.sessions("site")] == ["s1"]
        assert (await other.health("site")).proxy("p1").rest_until == 35.0
        assert await store.claim("k", 10.0)
        assert not await other.claim("k", 10.0)  # a claim holds across clients (processes)


async def test_more_calls_at_once_than_a_connection_pool_holds_are_served(store: SessionStore) -> None:
    """A worker's pages in flight ask the store at once: redis-py's default pool of 100 connections
    refused the 101st ("Too many connections", an outage to the caller)."""
    counts = await asyncio.gather(*(store.count("burst", 60.0) for _ in range(300)))
    assert sorted(counts) == list(range(1, 301))
