"""The config DB's errors say what went wrong, with the URL redacted; a missing SQLite file is not
created by a command that only reads."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from crawlherd.db import create_engine, current_revision, upgrade
from crawlherd.errors import BackendUnavailableError, ConfigurationError
from tests._netutil import free_port


async def _message(url: str) -> str:
    engine = create_engine(url)
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await current_revision(engine)
    finally:
        await engine.dispose()
    return str(info.value)


@pytest.mark.postgres
async def test_a_missing_postgres_database_is_named(postgres_url: str) -> None:
    url = postgres_url.rsplit("/", 1)[0] + "/crawlherd_no_such_db"
    message = await _message(url)
    assert "the database does not exist" in message and 'database "crawlherd_no_such_db" does not exist' in message


@pytest.mark.postgres
async def test_a_refused_login_says_so_and_hides_the_password(postgres_url: str) -> None:
    url = postgres_url.replace("postgresql://", "postgresql://crawlherd_nobody:s3cret@", 1).replace("postgres@", "")
    message = await _message(url)
    assert "the server refused the login" in message and "crawlherd_nobody" in message
    assert "s3cret" not in message and "***" in message


async def test_nothing_listening_and_unknown_host() -> None:
    refused = await _message(f"postgresql://u:pw@127.0.0.1:{free_port()}/db")
    assert "nothing answers at that address" in refused and "pw@" not in refused
    unknown = await _message("postgresql://u@no-such-host.invalid:5432/db")
    assert "unknown host" in unknown


def test_a_mistyped_sqlite_path_is_not_created_for_reading(tmp_path: Path) -> None:
    path = tmp_path / "crawlherd-typo.db"
    with pytest.raises(ConfigurationError, match=r"no config DB at .*crawlherd-typo.db .*check the path"):
        create_engine(f"sqlite:///{path}", must_exist=True)
    assert not path.exists()


def test_a_new_sqlite_config_db_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    asyncio.run(upgrade(f"sqlite:///{path}"))
    for file in [path, *tmp_path.glob("config.db-*")]:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file


async def test_the_dispatch_gauges_on_a_config_db_that_is_gone_are_an_outage() -> None:
    """The dispatcher reads its gauges between ticks: a config DB gone then (restarted) is an outage it
    waits out, not an error that ends it (a raw driver error did, under a PostgreSQL restart)."""
    from crawlherd.dispatch.gauges import refresh_dispatch_gauges

    engine = create_engine(f"postgresql://u:pw@127.0.0.1:{free_port()}/db")
    try:
        with pytest.raises(BackendUnavailableError, match="reading the dispatch gauges"):
            await refresh_dispatch_gauges(engine)
    finally:
        await engine.dispose()


async def test_a_sqlite_write_waits_for_a_lock_off_the_loop(tmp_path: Path) -> None:
    """A config DB's call runs on the loop's thread, but one that finds the file locked by another
    writer waits for it on its connection's thread: the loop goes on meanwhile, and the write is done
    once the lock is free."""
    import sqlite3

    from sqlalchemy import text

    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}", busy_timeout=30)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (a INTEGER)"))
        other = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")

        async def write() -> None:
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))

        task = asyncio.create_task(write())
        for _ in range(50):  # the loop turns while the write waits for the lock
            await asyncio.sleep(0)
        assert not task.done()
        other.execute("COMMIT")
        await asyncio.wait_for(task, 30)
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1
        other.close()
    finally:
        await engine.dispose()


async def test_a_sqlite_engines_own_transactions_take_turns_without_busy_waits(tmp_path: Path) -> None:
    """Two transactions of one engine at once: the second waits for the first's end on the engine's turn
    (no call of either is run again on a thread after a "database is locked"), then both are written."""
    from sqlalchemy import text

    from crawlherd.db._inline_sqlite import InlineConnection

    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (a INTEGER)"))
        async with engine.connect() as a, engine.connect() as b:  # two connections in the pool, opened
            await a.get_raw_connection()
            await b.get_raw_connection()
        first_in = asyncio.Event()
        release = asyncio.Event()
        drivers: list[InlineConnection] = []

        async def write(a: int, hold: bool) -> None:
            async with engine.begin() as conn:
                driver = (await conn.get_raw_connection()).driver_connection
                assert isinstance(driver, InlineConnection)
                drivers.append(driver)
                await conn.execute(text("INSERT INTO t VALUES (:a)"), {"a": a})
                if hold:
                    first_in.set()
                    await release.wait()

        first = asyncio.create_task(write(1, True))
        await first_in.wait()
        second = asyncio.create_task(write(2, False))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not second.done()
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 30)
        assert [d.waited for d in drivers] == [0, 0]
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2
    finally:
        await engine.dispose()
