"""``enqueue_many`` on the ``redis://`` frontier: one call for a batch that says which requests it queued."""

from __future__ import annotations

import pytest

from crawlherd.clock import FakeClock
from crawlherd.errors import QueueFullError
from crawlherd.frontier import open_scheduler
from crawlherd.frontier.base import EnqueueMany
from crawlherd.request import Request

from .test_durable_frontier import delete_prefix

pytestmark = pytest.mark.redis


async def test_enqueue_many_says_which_it_queued_across_hosts(redis_url: str, unique_name: str) -> None:
    frontier = await open_scheduler(f"{redis_url}?prefix={unique_name}", clock=FakeClock()).__aenter__()
    try:
        assert isinstance(frontier, EnqueueMany)
        assert await frontier.enqueue_request(Request("http://b.test/1"))
        reqs = [Request(f"http://{h}.test/{i}") for h, i in
                (("a", 1), ("b", 1), ("c", 1), ("a", 1), ("b", 2), ("c", 1), ("a", 2))]
        assert await frontier.enqueue_many(reqs) == [True, False, True, False, True, False, True]
        assert await frontier.enqueue_many([]) == []
        assert await frontier.size() == 5
        stats = await frontier.stats()
        assert (stats.enqueued, stats.duplicates_filtered) == (5, 3)
    finally:
        await frontier.close()
        await delete_prefix(redis_url, unique_name)


async def test_enqueue_many_on_a_full_frontier_keeps_what_it_queued(redis_url: str, unique_name: str) -> None:
    frontier = await open_scheduler(f"{redis_url}?prefix={unique_name}", clock=FakeClock(), max_size=2,
                                    full_policy="raise").__aenter__()
    try:
        assert isinstance(frontier, EnqueueMany)
        with pytest.raises(QueueFullError):
            await frontier.enqueue_many([Request(f"http://a.test/{i}") for i in range(3)])
        assert await frontier.size() == 2
        # those it queued are known; the refused one was not recorded as seen
        assert await frontier.enqueue_many([Request(f"http://a.test/{i}") for i in range(2)]) == [False, False]
        lease = await frontier.next_request()
        assert lease is not None
        await frontier.ack(lease)
        assert await frontier.enqueue_many([Request("http://a.test/2")]) == [True]
    finally:
        await frontier.close()
        await delete_prefix(redis_url, unique_name)
