"""A crawl's page budget (``max_pages``) with pages queueing their links at once (``CrawlRun.room``):
on a frontier that awaits I/O (Redis), many pages in flight, duplicate links everywhere -- exactly
``max_pages`` pages are queued, never one more, never one fewer."""

from __future__ import annotations

import pytest

from crawlherd import Crawler, CrawlerRunConfig
from tests.servers.timestamping import TimestampingServer

from .test_durable_frontier import delete_prefix

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]


@pytest.mark.parametrize("budget", [37, 120])
async def test_pages_queueing_links_at_once_fill_the_budget_exactly(
    redis_url: str, unique_name: str, budget: int
) -> None:
    frontier = f"{redis_url}?prefix={unique_name}"
    with TimestampingServer(pages=1000) as server:  # /page/n links to 2n and 2n+1
        seeds = [f"{server.urls[0]}/page/{n}" for n in (1, 1, 2, 3)]  # duplicates among seeds and links
        async with Crawler(allow_private_addresses=True, config=CrawlerRunConfig(concurrency=16)) as crawler:
            results = await crawler.crawl(
                seeds, max_pages=budget, max_depth=20, delay=0, frontier=frontier, stream=False
            )
    await delete_prefix(redis_url, unique_name)
    fetched = {r.url for r in results if r.success}
    assert len(fetched) == budget and len(server.stamps) == budget
