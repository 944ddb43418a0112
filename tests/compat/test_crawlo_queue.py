"""Crawlo's queue layer on crawlherd's frontier: the memory queue's order and bounds, the manager's
full-queue back-pressure, the backend registry, the Redis queue's leases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from crawlherd.compat.crawlo.http.request import Request
from crawlherd.compat.crawlo.queue import (
    QueueConfig,
    QueueManager,
    QueueType,
    RedisPriorityQueue,
    SpiderPriorityQueue,
    register_queue_backend,
    unregister_queue_backend,
)
from crawlherd.compat.crawlo.queue.exceptions import QueueClosedError, QueueFullTimeout
from crawlherd.compat.crawlo.queue.queue_manager import _QUEUE_BUILDERS
from crawlherd.errors import BackendUnavailableError
from tests.support.processes import wait_until


async def test_smallest_priority_first_and_duplicates_kept() -> None:
    queue = SpiderPriorityQueue()
    for p in (5, 3, 8, -10, 999999, -999999, 0):
        await queue.put(Request(f"http://example.com/p/{p}"), priority=p)
    await queue.put(Request("http://example.com/p/0"), priority=0)
    assert await queue.size() == 8 and queue.qsize() == 8
    out = [await queue.get(timeout=1.0) for _ in range(8)]
    assert [r.url.rsplit("/", 1)[1] for r in out] == ["-999999", "-10", "0", "0", "3", "5", "8", "999999"]
    assert await queue.get(timeout=0.05) is None
    assert queue.empty()


async def test_request_priority_is_stored_negated_as_in_crawlo() -> None:
    request = Request("http://example.com/", priority=5, meta={"a": 1}, params={"q": "x"})
    assert request.priority == -5 and request.url == "http://example.com/?q=x"
    posted = Request("http://example.com/form", form_data={"a": "1"})
    assert posted.method == "POST" and posted.body == b"a=1"


async def test_a_bounded_queue_waits_for_room() -> None:
    queue = SpiderPriorityQueue(maxsize=2)
    for i in range(2):
        await queue.put(Request(f"http://example.com/{i}"))
    third = asyncio.create_task(queue.put(Request("http://example.com/2")))
    await asyncio.sleep(0.05)
    assert not third.done() and queue.full()
    assert (await queue.get(timeout=1.0)).url == "http://example.com/0"
    await asyncio.wait_for(third, 5)
    assert await queue.size() == 2
    await queue.close()
    with pytest.raises(QueueClosedError):
        await queue.put(Request("http://example.com/after"))


async def test_concurrent_puts_all_land() -> None:
    queue = SpiderPriorityQueue()

    async def batch(start: int) -> None:
        for i in range(start, start + 50):
            await queue.put(Request(f"http://example.com/{i}"))

    await asyncio.gather(*(batch(i * 50) for i in range(8)))
    assert await queue.size() == 400
    with pytest.raises(TypeError, match="requests"):
        await queue.put("not a request")


def _manager(max_size: int, policy: str = "drop_with_counter") -> QueueManager:
    return QueueManager(QueueConfig(queue_type="memory", max_queue_size=max_size, enqueue_full_policy=policy))


async def test_a_full_manager_waits_then_times_out() -> None:
    manager = _manager(2)
    assert manager.pending_enqueue_count == 0
    await manager.initialize()
    for i in range(2):
        assert await manager.put(Request(f"http://example.com/{i}"), priority=0)
    blocked = asyncio.create_task(manager.put(Request("http://example.com/late"), priority=0, timeout=10.0))
    async def blocked_waiting() -> bool:
        return manager.pending_enqueue_count == 1

    await wait_until(blocked_waiting, deadline=5)
    assert (await manager.get()).url == "http://example.com/0"
    assert await asyncio.wait_for(blocked, 5) is True
    assert manager.pending_enqueue_count == 0
    with pytest.raises(QueueFullTimeout, match="full") as err:
        await manager.put(Request("http://example.com/overflow"), priority=0, timeout=0.05)
    assert (err.value.queue_size, err.value.max_size) == (2, 2)
    assert manager.pending_enqueue_count == 0
    await manager.close()


async def test_the_backend_registry() -> None:
    class Dummy:
        def __init__(self, manager: QueueManager) -> None:
            self.manager = manager

    async def build(manager: QueueManager) -> Any:
        return Dummy(manager)

    register_queue_backend("memory", build)
    try:
        assert _QUEUE_BUILDERS[QueueType.MEMORY] is build
        manager = QueueManager(QueueConfig(queue_type="memory"))
        await manager.initialize()
        assert isinstance(manager._queue, Dummy)
    finally:
        assert unregister_queue_backend(QueueType.MEMORY) is True
    assert unregister_queue_backend("memory") is False
    with pytest.raises(ValueError, match="unknown queue type"):
        register_queue_backend("no_such_queue", build)
    with pytest.raises(ValueError, match="callable"):
        register_queue_backend(QueueType.MEMORY, None)  # type: ignore[arg-type]


async def test_redis_queue_round_trip_and_leases(redis_url: str, unique_name: str) -> None:
    queue = RedisPriorityQueue(redis_url=redis_url, queue_name=f"crawlo:{unique_name}:queue:requests",
                               project_name=unique_name, timeout=60, max_retries=1)
    assert queue.failed_queue == f"crawlo:{unique_name}:queue:failed"
    assert await queue.put_batch([]) == 0
    try:
        await queue.connect()

        def parse(response: Any) -> None: ...

        first = Request("http://example.com/a", callback=parse, meta={"depth": 2}, dont_filter=True)
        assert await queue.put_batch([(first, 1), (Request("http://example.com/b"), 0)], batch_size=1) == 2
        assert await queue.put(Request("http://example.com/a"), priority=5)  # the queue itself filters nothing
        got = await queue.get(timeout=1.0)
        assert got.url == "http://example.com/b" and await queue.size() == 2
        await queue.ack(got)
        again = await queue.get(timeout=1.0)
        assert (again.url, again.callback, again.meta, again.dont_filter) == ("http://example.com/a", "parse",
                                                                                {"depth": 2}, True)
        await queue.fail(again, "timeout")  # back in the queue (max_retries=1)
        assert (await queue.get(timeout=1.0)).url == "http://example.com/a"
    finally:
        await queue.close()


async def test_redis_queue_without_redis() -> None:
    queue = RedisPriorityQueue(redis_url="redis://127.0.0.1:9/0", project_name="t")
    with pytest.raises(BackendUnavailableError, match="Redis queue"):
        await queue.connect(max_retries=1, delay=0)
