"""Test helpers for the config DB: fresh databases and bulk-made targets."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import ScrapeTarget, Website, db_now
from crawlherd.sitespec import SiteSpec


@contextmanager
def fresh_postgres_database(server_url: str) -> Iterator[str]:
    """Create a database with a unique name on the server of ``server_url``; drop it afterwards."""
    name = f"crawlherd_{uuid.uuid4().hex[:12]}"
    admin = server_url.replace("postgresql://", "postgres://", 1)

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    try:
        yield server_url.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def add_website(engine: AsyncEngine, name: str = "site", **overrides: Any) -> int:
    """A website row; ``overrides`` are :class:`SiteSpec` fields."""
    spec = SiteSpec.model_validate(
        {
            "name": name,
            "base_url": "https://jobs.example.com",
            "search_url_template": "https://jobs.example.com/search?q={keywords}&l={location}",
            "pagination": {"type": "page_param", "param": "page", "max_pages": 3},
            "extraction": {"item_selector": "article"},
            "metadata": {"country": "de"},
            **overrides,
        }
    )
    async with engine.begin() as conn:
        now = await db_now(conn)
        result = await conn.execute(
            insert(Website).values(name=name, spec=spec.model_dump(mode="json"), created_at=now, updated_at=now)
        )
        return int(result.inserted_primary_key[0])  # type: ignore[index]


async def add_targets(
    engine: AsyncEngine,
    website_id: int,
    count: int,
    *,
    every: timedelta,
    anchor: datetime | None = None,
    misfire: str = "skip",
    backfill_limit: int = 0,
    grace: timedelta = timedelta(seconds=60),
    jitter_ms: int = 0,
    keyword_prefix: str = "kw",
) -> list[int]:
    """``count`` interval targets whose first slot is ``anchor`` (default: the DB's now, rounded up to
    the next whole ``every``)."""
    async with engine.begin() as conn:
        now = await db_now(conn)
        if anchor is None:
            anchor = now
        rows = [
            {
                "website_id": website_id,
                "keywords": f"{keyword_prefix} {i}",
                "location": "Berlin",
                "schedule_kind": "interval",
                "interval_seconds": every.total_seconds(),
                "cron": None,
                "timezone": "UTC",
                "anchor_at": anchor,
                "jitter_ms": jitter_ms,
                "misfire_policy": misfire,
                "backfill_limit": backfill_limit,
                "misfire_grace_seconds": grace.total_seconds(),
                "active": True,
                "next_run_at": anchor + timedelta(milliseconds=jitter_ms),
                "created_at": now,
                "updated_at": now,
            }
            for i in range(count)
        ]
        ids: list[int] = []
        for start in range(0, len(rows), 1000):
            result = await conn.execute(
                insert(ScrapeTarget.__table__).returning(ScrapeTarget.__table__.c.id),  # type: ignore[arg-type]
                rows[start : start + 1000],
            )
            ids.extend(int(r[0]) for r in result)
        return ids


async def database_now(engine: AsyncEngine) -> datetime:
    async with engine.connect() as conn:
        return await db_now(conn)
