"""Test helpers for the console: websites and targets made through the console's own save path."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.console import editing
from crawlherd.db.models import ScrapeTarget, Website

CARD_RULES: dict[str, Any] = {
    "item_selector": "article.job-card",
    "item_url": "a.job-link@href",
    "required": ["title"],
    "fields": {"title": "h2.title", "company": ".company", "location": ".location"},
}


async def add_site(engine: AsyncEngine, name: str, base: str, *, path: str = "/search", **extra: Any) -> None:
    """A website on ``base`` whose search is ``path?q=...&l=...`` with the demo site's card rules."""
    await editing.save_website(
        engine,
        {
            "name": name,
            "base_url": base,
            "search_url_template": f"{base}{path}?q={{keywords}}&l={{location}}",
            "pagination": {"type": "none", "max_pages": 1},
            "extraction": CARD_RULES,
            "politeness": {"min_delay": 0, "max_concurrency": 4, "robots": "ignore"},
            **extra,
        },
        actor="test",
    )


async def add_target(engine: AsyncEngine, website: str, keywords: str, location: str = "", **schedule: Any) -> int:
    """One target; returns its id."""
    values: dict[str, Any] = {"website": website, "keywords": [keywords], "locations": [location], **schedule}
    values.setdefault("every", "1h") if "cron" not in values else None
    await editing.save_target(engine, values, actor="test")
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    select(ScrapeTarget.id)
                    .join(Website)
                    .where(
                        Website.name == website, ScrapeTarget.keywords == keywords, ScrapeTarget.location == location
                    )
                )
            ).scalar_one()
        )
