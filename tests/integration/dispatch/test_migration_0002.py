"""Migration 0002 folds a website's flattened columns into ``websites.spec`` (a SiteSpec) and back,
on a real SQLite file and a real PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, text

from crawlherd.db import create_engine, upgrade
from crawlherd.db.migrate import alembic_config
from crawlherd.sitespec import SiteSpec
from tests.support.db import fresh_postgres_database

OLD_ROW = """INSERT INTO websites (name, base_url, search_url_template, requires_playwright, pagination_type,
    pagination, extraction, metadata, min_delay, max_concurrency, robots_policy, created_at, updated_at)
    VALUES ('old-site', 'https://jobs.example.com', 'https://jobs.example.com/s?q={keywords}', true,
    'next_link', '{"selector": "a.next", "param": "page", "start": 1, "step": 1, "max_pages": 4}',
    '{"item_selector": "article", "fields": {"title": "h2"}}', '{"country": "de", "revisit_age_seconds": 60}',
    0.5, 3, 'ignore', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/config.db"
        return
    with fresh_postgres_database(request.getfixturevalue("postgres_url")) as url:
        yield url


async def test_0002_folds_the_columns_into_a_site_spec_and_back(empty_db: str) -> None:
    engine = create_engine(empty_db)
    try:
        assert await upgrade(engine, "0001") == "0001"
        async with engine.begin() as conn:
            await conn.execute(text(OLD_ROW))
        assert await upgrade(engine, "0002") == "0002"
        async with engine.connect() as conn:
            stored = (await conn.execute(text("SELECT spec FROM websites"))).scalar_one()
        spec = SiteSpec.model_validate_json(stored) if isinstance(stored, str) else SiteSpec.model_validate(stored)
        assert spec.name == "old-site" and spec.requires_playwright
        assert (spec.pagination.type, spec.pagination.selector, spec.pagination.max_pages) == ("next_link", "a.next", 4)
        assert spec.politeness.model_dump() == {"min_delay": 0.5, "max_concurrency": 3, "robots": "ignore"}
        assert spec.revisit_age == 60 and spec.metadata == {"country": "de"}
        assert spec.rules is not None and spec.rules.item_selector == "article"

        def downgrade(sync_conn: Connection) -> None:
            cfg = alembic_config()
            cfg.attributes["connection"] = sync_conn
            command.downgrade(cfg, "0001")

        async with engine.begin() as conn:
            await conn.run_sync(downgrade)
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text("SELECT pagination_type, min_delay, max_concurrency, robots_policy, base_url FROM websites")
                )
            ).one()
        assert tuple(row) == ("next_link", 0.5, 3, "ignore", "https://jobs.example.com")
    finally:
        await engine.dispose()
