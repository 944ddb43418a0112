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


async def a_retried_dead_job(engine: AsyncEngine, target_id: int, *, error: str) -> int:
    """A job of ``target_id`` that failed once, died (``error``), was retried from the dead letters and
    then succeeded -- recorded as the relay and a worker record it; returns its run id."""
    from crawlherd.brokers.memory import MemoryBroker
    from crawlherd.console.dead_letters import retry_dead
    from crawlherd.console.run_now import run_now
    from crawlherd.db.models import DispatchOutbox
    from crawlherd.dispatch.relay import Relay
    from crawlherd.messages import decode_job
    from crawlherd.worker.runs import RunStore

    await run_now(engine, target_id, requested_by="test")
    assert (await Relay(engine, MemoryBroker()).run_round()).published == 1
    async with engine.connect() as conn:
        outbox = select(DispatchOutbox.body).where(DispatchOutbox.target_id == target_id)
        body = (await conn.execute(outbox)).scalar_one()
    first = decode_job(body.encode())
    second = first.model_copy(update={"attempt_count": 1})
    store = RunStore(engine)
    await store.start(first, worker="w1")
    await store.finish(first, status="failed", error="HTTP 503 from the site")
    await store.start(second, worker="w1")
    await store.finish(second, status="dead", error=error)
    run_id = (await store.dead())[-1].id
    assert await retry_dead(engine, [run_id], actor="test") == 1
    assert (await Relay(engine, MemoryBroker()).run_round()).published == 1
    await store.start(first, worker="w2")  # the message sent again is the original one: attempt 1 again
    await store.finish(first, status="succeeded", pages=1, items_new=2)
    return run_id
