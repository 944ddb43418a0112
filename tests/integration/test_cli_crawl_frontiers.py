"""``crawlherd crawl --frontier sqlite:///…`` and ``--frontier redis://…``: a real process, a real local
server, and the durable frontier the crawl went through left as the crawl says."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.servers.misbehaving import MisbehavingServer
from tests.support.forkserver import exec_crawlherd

from .test_durable_frontier import delete_prefix


@pytest.fixture
async def server() -> AsyncIterator[MisbehavingServer]:
    async with MisbehavingServer(pages=40) as s:
        yield s


async def crawl(server: MisbehavingServer, frontier: str, out: Path) -> list[dict[str, object]]:
    proc = await exec_crawlherd(
        "crawl", server.url + "/page/1", "--allow-private", "--delay", "0",
        "--max-pages", "12", "--depth", "9", "--output", str(out), "--frontier", frontier,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert "crawled 12 page(s): 12 ok, 0 failed" in err.decode()
    rows = read_rows(out)
    assert len(rows) == 12 and len({r["url"] for r in rows}) == 12
    assert all(r["success"] and r["status_code"] == 200 for r in rows)
    return rows


def read_rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_crawl_through_a_sqlite_frontier(server: MisbehavingServer, tmp_path: Path) -> None:
    db = tmp_path / "frontier.db"
    await crawl(server, f"sqlite:///{db}", tmp_path / "pages.jsonl")
    with sqlite3.connect(db) as conn:
        counters = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'counters'").fetchone()[0])
        leases = conn.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
    # the 12 pages and the host's robots.txt, which the frontier schedules as work of the host
    assert counters["acked"] == 12 + 1 and leases == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT host, id FROM robots").fetchall() == [(server.url.split("//")[1], None)]


@pytest.mark.redis
async def test_crawl_through_a_redis_frontier(
    server: MisbehavingServer, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    try:
        await crawl(server, f"{redis_url}?prefix={unique_name}", tmp_path / "pages.jsonl")
        client = aioredis.Redis.from_url(redis_url)
        try:
            assert int(await client.hget(f"{unique_name}:c", "acked") or 0) == 12 + 1  # pages + robots.txt
            assert not await client.exists(f"{unique_name}:rb")  # no host left robots-pending
            assert await client.zcard(f"{unique_name}:lexp") == 0
        finally:
            await client.aclose()
    finally:
        await delete_prefix(redis_url, unique_name)
