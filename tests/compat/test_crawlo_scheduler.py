"""Crawlo's Scheduler on crawlherd: duplicate filtering and its DEBUG line, Crawlo requests out of
next_request, the full-queue policies, the pending-enqueue guard."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from crawlherd.compat.crawlo.core.engine import has_pending_enqueues
from crawlherd.compat.crawlo.core.scheduling.task_scheduler import Scheduler
from crawlherd.compat.crawlo.crawler import CrawloFramework
from crawlherd.compat.crawlo.filters.memory_filter import MemoryFilter
from crawlherd.compat.crawlo.http.request import Request
from crawlherd.compat.crawlo.queue.exceptions import QueueFullTimeout
from crawlherd.compat.crawlo.settings.setting_manager import SettingManager
from tests.support.processes import wait_until


class Stats:
    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def inc_value(self, key: str, count: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count


class Spider:
    def parse(self, response: Any) -> None: ...


class Crawler:
    def __init__(self, **settings: Any) -> None:
        self.settings = SettingManager({"QUEUE_TYPE": "memory", **settings})
        self.stats = Stats()
        self.spider = Spider()


async def _open(**settings: Any) -> tuple[Scheduler, Crawler]:
    crawler = Crawler(**settings)
    scheduler = Scheduler.create_instance(crawler)
    await scheduler.open()
    return scheduler, crawler


async def test_duplicates_are_filtered_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "crawlherd.crawlo")
    scheduler, crawler = await _open(DEPTH_PRIORITY=0)
    assert isinstance(scheduler.dupe_filter, MemoryFilter)
    first = Request("http://example.com/a", callback=Spider.parse, priority=3)
    assert await scheduler.enqueue_request(first) is True
    assert await scheduler.enqueue_request(Request("http://example.com/a", headers={"User-Agent": "x"})) is False
    assert await scheduler.enqueue_request(Request("http://example.com/a", dont_filter=True)) is True
    messages = [r.getMessage() for r in caplog.records if r.name == "crawlherd.crawlo"]
    assert "Request queued: http://example.com/a, Priority: -3" in messages
    assert messages.count("Filtered duplicate request: http://example.com/a") == 1
    out = await scheduler.next_request()
    assert isinstance(out, Request) and out is first and out.meta["depth"] == 1
    assert await scheduler.async_size() == 1
    await scheduler.close()


async def test_depth_priority_moves_deeper_requests() -> None:
    scheduler, _ = await _open(DEPTH_PRIORITY=1)
    for depth in (1, 3, 2):
        await scheduler.enqueue_request(Request(f"http://example.com/{depth}", meta={"depth": depth}))
    order = [(await scheduler.next_request()).meta["depth"] for _ in range(3)]
    assert order == [3, 2, 1]  # DEPTH_PRIORITY > 0: deeper first
    await scheduler.close()


@pytest.mark.parametrize("policy", ["drop_with_counter", "block", "raise"])
async def test_full_queue_policies(policy: str) -> None:
    scheduler, crawler = await _open(SCHEDULER_MAX_QUEUE_SIZE=1, ENQUEUE_FULL_POLICY=policy,
                                     ENQUEUE_DROP_TIMEOUT=0.05, ENQUEUE_BLOCK_TIMEOUT=0.05)
    assert await scheduler.enqueue_request(Request("http://example.com/1"))
    late = Request("http://example.com/2")
    if policy == "raise":
        with pytest.raises(QueueFullTimeout):
            await scheduler.enqueue_request(late)
        assert crawler.stats.values == {}
    else:
        assert await scheduler.enqueue_request(late) is False
        assert crawler.stats.values == {"scheduler/enqueue_dropped_count": 1}
    await scheduler.close()


async def test_blocked_enqueues_keep_the_crawl_alive() -> None:
    scheduler, _ = await _open(SCHEDULER_MAX_QUEUE_SIZE=1, ENQUEUE_FULL_POLICY="block", ENQUEUE_BLOCK_TIMEOUT=None)
    assert not has_pending_enqueues(scheduler) and not has_pending_enqueues(None)
    await scheduler.enqueue_request(Request("http://example.com/1"))
    blocked = asyncio.create_task(scheduler.enqueue_request(Request("http://example.com/2")))

    async def waiting() -> bool:
        return scheduler.pending_enqueue_count == 1

    await wait_until(waiting, deadline=5)
    assert has_pending_enqueues(scheduler)
    assert (await scheduler.next_request()).url == "http://example.com/1"
    assert await asyncio.wait_for(blocked, 5) is True
    assert not has_pending_enqueues(scheduler)
    await scheduler.close()
    assert Scheduler(None, MemoryFilter(), None, 0).pending_enqueue_count == 0


async def test_a_redis_queue_through_the_framework(redis_url: str, unique_name: str) -> None:
    framework = CrawloFramework({"QUEUE_TYPE": "redis", "REDIS_URL": redis_url, "PROJECT_NAME": unique_name,
                                 "FILTER_CLASS": "crawlo.filters.AioRedisFilter", "DEPTH_PRIORITY": 0})
    framework.spider = Spider()
    scheduler = await framework.open_scheduler()
    other = await framework.open_scheduler()  # a second process of the same crawl
    try:
        assert await scheduler.enqueue_request(Request("http://example.com/x", callback=Spider.parse))
        assert await other.enqueue_request(Request("http://example.com/x")) is False  # the filter is shared
        request, receipt = await other.next_request_with_ack()
        assert request.url == "http://example.com/x" and request.callback == framework.spider.parse
        await other.ack_request(receipt)
        assert await scheduler.next_request() is None
    finally:
        await scheduler.close()
        await other.close()
