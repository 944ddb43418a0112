"""The config DB's SQL capabilities: flags derived once per engine, the same object for its connections."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.dialects import postgresql, sqlite

from crawlherd.db.dialect import sql_capabilities
from crawlherd.db.engine import create_engine


async def test_sqlite_flags_and_one_object_per_engine(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        sql = sql_capabilities(engine)
        assert sql.is_sqlite and sql.naive_datetimes and sql.on_conflict
        assert not (sql.skip_locked or sql.array_params or sql.plan_cache_mode)
        assert sql.insert is sqlite.insert
        async with engine.connect() as conn:
            assert sql_capabilities(conn) is sql
        assert sql_capabilities(engine.sync_engine.dialect) is sql
    finally:
        await engine.dispose()


async def test_postgresql_flags() -> None:
    engine = create_engine("postgresql://user@127.0.0.1:1/none")  # never connected
    try:
        sql = sql_capabilities(engine)
        assert sql.name == "postgresql" and not sql.is_sqlite and not sql.naive_datetimes
        assert sql.skip_locked and sql.array_params and sql.plan_cache_mode and sql.returning and sql.on_conflict
        assert sql.insert is postgresql.insert
    finally:
        await engine.dispose()
