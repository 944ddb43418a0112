"""``crawlherd frontier purge`` empties the frontier's sessions store too: every website's sessions
(logins), proxy health and tier -- on SQLite (a file beside the frontier's), Redis and a Redis Cluster
(where the sessions' keys are not under the frontier's hash tag, so the frontier's own purge left them)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from crawlherd.cli import main
from crawlherd.frontier import open_scheduler
from crawlherd.request import Request
from crawlherd.sessions import Session, SiteHealth, TierRule, open_sessions

RULE = TierRule(tiers=2, cool_off=600.0, escalate_after=1, descend_after=5)


@pytest.fixture(params=["sqlite", "redis", "redis-cluster"])
def frontier_url(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'frontier.db'}"
    base = request.getfixturevalue("redis_cluster_url" if request.param == "redis-cluster" else "redis_url")
    return f"{base}?prefix={unique_name}"


async def test_purge_forgets_the_sessions_and_proxy_health(frontier_url: str) -> None:
    async with open_scheduler(frontier_url) as frontier:
        await frontier.enqueue_requests(Request(f"http://jobs.test/{i}") for i in range(3))
    async with open_sessions(frontier_url) as store:
        await store.add("jobs", Session("s1", "http://p1:3128", login_epoch=1))
        await store.record("jobs", "http://p1:3128", "blocked", now=1.0, rule=RULE)  # rested, tier 1
        await store.add("news", Session("s2", "direct"))
    result = await asyncio.to_thread(CliRunner().invoke, main, ["frontier", "purge", "--url", frontier_url, "--yes",
                                                                "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session_sites"] == 2
    async with open_sessions(frontier_url) as store:
        assert await store.sites() == []
        assert await store.sessions("jobs") == [] and await store.health("jobs") == SiteHealth()
    async with open_scheduler(frontier_url) as frontier:
        assert (await frontier.stats()).queued == 0
