"""What the long-running services say at start-up instead of carrying on wrongly: ``worker`` and
``dispatch`` refuse a config DB that was never set up (``crawlherd db upgrade`` is the operator's
step, and a typo in the URL must not make a second, empty database), and a worker on a shared config DB
with no frontier URL says that its frontier is its own."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from sqlalchemy import inspect

from crawlherd.db import create_engine
from tests.support.cli import invoke, running_crawlherd
from tests.support.real_brokers import remove


async def table_names(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: inspect(sync).get_table_names())
    finally:
        await engine.dispose()


@pytest.mark.parametrize("command", [["worker"], ["dispatch", "--once"]], ids=["worker", "dispatch"])
async def test_worker_and_dispatch_refuse_a_config_db_without_tables(command: list[str], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/typo.db"
    code, out, err = await invoke(*command, "--database-url", db)
    assert code != 0 and out == ""
    assert "the config DB has no tables yet: run `crawlherd db upgrade` first" in err, err
    assert await table_names(db) == []  # nothing was created
    # The embedded commands still set a new database up themselves, and then the services take it.
    assert (await invoke("db", "upgrade", "--database-url", db))[0] == 0
    code, _, err = await invoke("dispatch", "--once", "--database-url", db)
    assert code == 0, err


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_a_worker_on_a_shared_config_db_without_a_frontier_url_says_its_frontier_is_its_own(
    pg_database: str, redis_url: str, unique_name: str
) -> None:
    env = {"CRAWLHERD_DATABASE_URL": pg_database, "CRAWLHERD_BROKER_URL": f"{redis_url}?prefix={unique_name}"}
    try:
        await says_so_unless_a_frontier_url_is_given(env, redis_url, unique_name)
    finally:
        await remove(env["CRAWLHERD_BROKER_URL"], "redis", unique_name)


async def says_so_unless_a_frontier_url_is_given(env: dict[str, str], redis_url: str, unique_name: str) -> None:
    async with running_crawlherd("worker", env=env) as proc:
        assert proc.stderr is not None
        banner = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert "frontier memory://" in banner, banner
        warning = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert warning.startswith("warning: this worker's frontier is memory://, its own"), warning
        assert "--frontier-url redis://" in warning
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0
    env["CRAWLHERD_FRONTIER_URL"] = f"{redis_url}?prefix={unique_name}f"
    async with running_crawlherd("worker", env=env) as proc:
        assert proc.stderr is not None
        await asyncio.wait_for(proc.stderr.readline(), 30)  # the banner
        proc.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(proc.communicate(), 30)
        assert "warning" not in rest.decode()
