"""Issue 14, must-show 1 (Crawlo): the examples of Crawlo's scheduler page (``tests/seeds/crawlo_*.py``,
only the import line changed -- and ``await`` on the scheduler's coroutines) configure and drive a
crawlherd frontier that keeps the page's promises: the settings' defaults, priority order, duplicates
filtered and logged, the queue limit, memory queue + Redis filter, and the Redis queue (real Redis; a
private ``redis-server`` with a password for ``REDIS_PASSWORD``)."""

from __future__ import annotations

import ast
import asyncio
import importlib
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest

from crawlherd import CrawloConfig, Request, open_crawlo_scheduler, open_scheduler
from crawlherd.compat.crawlo import (
    CrawloSettings,
    FilterConnectionException,
    QueueFullException,
    RedisFingerprintFilter,
    SplitFrontier,
)
from crawlherd.errors import BackendUnavailableError, ConfigurationError, QueueFullError
from tests.support.services import require_tool

pytestmark = pytest.mark.timeout(60)

SEEDS = Path(__file__).resolve().parents[1] / "seeds"


def seed(name: str) -> ModuleType:
    return importlib.reload(importlib.import_module(f"tests.seeds.{name}"))


def settings_of(name: str, **overrides: Any) -> dict[str, Any]:
    """A seed settings module as a mapping, with ``overrides`` (the test's isolation: its own Redis
    port, its own key prefix)."""
    module = seed(name)
    return {**{k: getattr(module, k) for k in dir(module) if k.isupper()}, **overrides}


async def run_with_top_level_await(name: str, **namespace: Any) -> dict[str, Any]:
    source = (SEEDS / f"{name}.py").read_text()
    code = compile(source, str(SEEDS / f"{name}.py"), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)  # noqa: S307 - our own test file
    if asyncio.iscoroutine(result):
        await result
    return namespace


def crawlo_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "crawlherd.crawlo"]


# -- settings ---------------------------------------------------------------------------------------------------


def test_memory_queue_settings_and_crawlos_defaults() -> None:
    s = CrawloSettings.from_settings(seed("crawlo_01_memory_queue"))
    assert (s.queue_type, s.filter_type, s.max_queue_size) == ("memory", "memory", 10_000)
    assert s.frontier_url == "memory://" and s.frontier_options["max_size"] == 10_000
    # SCHEDULER_MAX_QUEUE_SIZE defaults to Crawlo's 10,000 when a project does not set it
    assert CrawloSettings.from_settings(seed("crawlo_03_memory_filter")).max_queue_size == 10_000
    sizes = [CrawloSettings.from_settings(seed(n)).max_queue_size
             for n in ("crawlo_06_queue_size", "crawlo_09_small_scale", "crawlo_10_large_scale")]
    assert sizes == [50_000, 1_000, 100_000]


def test_redis_settings_make_a_redis_url_with_the_password() -> None:
    s = CrawloSettings.from_settings(seed("crawlo_02_redis_queue"))
    assert s.queue_type == "redis" and s.redis_url == "redis://:password@127.0.0.1:6379/0"
    assert s.frontier_url == "redis://:password@127.0.0.1:6379/0?prefix=crawlherd"
    assert "password" not in repr(s)  # secrets stay out of reprs
    f = CrawloSettings.from_settings(seed("crawlo_04_redis_filter"))
    assert (f.queue_type, f.filter_type, f.redis_url) == ("memory", "redis", "redis://127.0.0.1:6379/0")


def test_crawlo_config_helpers() -> None:
    ns = seed("crawlo_08_config")
    assert ns.config.settings.queue_type == "redis" and ns.config.settings.filter_type == "redis"
    standalone = CrawloConfig.standalone(queue_type="memory")
    assert standalone.settings.frontier_url == "memory://"
    assert standalone.to_dict()["SCHEDULER_MAX_QUEUE_SIZE"] == 10_000
    with pytest.raises(ConfigurationError, match="CrawloConfig: unknown option 'queue_tpye'; did you mean queue_type"):
        CrawloConfig.standalone(queue_tpye="memory")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"QUEUE_TPYE": "redis"}, "unknown scheduler setting QUEUE_TPYE; did you mean QUEUE_TYPE?"),
        ({"QUEUE_TYPE": "kafka"}, "QUEUE_TYPE='kafka': use 'memory' or 'redis'"),
        ({"SCHEDULER_MAX_QUEUE_SIZE": "10k"}, "SCHEDULER_MAX_QUEUE_SIZE='10k': must be an int >= 0 (0: unbounded)"),
        ({"REDIS_PORT": 70000}, "REDIS_PORT=70000: must be a port number"),
    ],
)
def test_a_mistyped_setting_is_told(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        CrawloSettings.from_settings(settings)
    assert str(info.value) == message


def test_other_components_settings_are_left_alone() -> None:
    s = CrawloSettings.from_settings({"CONCURRENCY": 8, "USER_AGENT": "x", "QUEUE_TYPE": "memory"})
    assert s.queue_type == "memory"


# -- memory queue ----------------------------------------------------------------------------------------------


async def test_priority_order_and_duplicates(caplog: pytest.LogCaptureFixture) -> None:
    page = seed("crawlo_11_priorities")
    one = seed("crawlo_05_priority")
    caplog.set_level(logging.DEBUG, logger="crawlherd.crawlo")
    async with open_crawlo_scheduler(seed("crawlo_01_memory_queue")) as scheduler:
        for request in (page.detail_request, page.list_request, page.homepage_request):
            assert await scheduler.enqueue_request(request) is True
        # the page's other example asks for http://example.com again (priority 10): a duplicate
        assert await scheduler.enqueue_request(one.request) is False
        order = []
        while (lease := await scheduler.next_request()) is not None:
            order.append(lease.request.url)
            await scheduler.ack(lease)
        assert not await scheduler.has_pending_requests() and await scheduler.idle()
    assert order == ["http://example.com", "http://example.com/list", "http://example.com/detail"]
    log = crawlo_log(caplog)
    assert log[:4] == [
        "Request queued: http://example.com/detail, Priority: 10",
        "Request queued: http://example.com/list, Priority: 50",
        "Request queued: http://example.com, Priority: 100",
        "Duplicate request filtered: http://example.com",
    ]
    assert "Current queue size: 2" in log


async def test_batch_enqueueing_then_again_as_duplicates(caplog: pytest.LogCaptureFixture) -> None:
    async with open_crawlo_scheduler(seed("crawlo_01_memory_queue")) as scheduler:
        await run_with_top_level_await("crawlo_07_batch", scheduler=scheduler)
        assert await scheduler.size() == 100
        caplog.set_level(logging.DEBUG, logger="crawlherd.crawlo")
        await run_with_top_level_await("crawlo_07_batch", scheduler=scheduler)
        assert await scheduler.size() == 100
        assert (await scheduler.stats()).duplicates_filtered == 100
    assert crawlo_log(caplog)[:2] == [
        "Duplicate request filtered: http://example.com/0", "Duplicate request filtered: http://example.com/1",
    ]


async def test_queue_limit_refuses_with_crawlos_warning(caplog: pytest.LogCaptureFixture) -> None:
    async with open_crawlo_scheduler(seed("crawlo_09_small_scale")) as scheduler:
        results = [await scheduler.enqueue_request(Request(f"http://example.com/{i}")) for i in range(1001)]
        assert results.count(True) == 1000 and results[-1] is False
        assert await scheduler.size() == 1000
        lease = await scheduler.next_request()
        assert lease is not None
        await scheduler.ack(lease)
        # refused, not recorded: once there is room it can come again
        assert await scheduler.enqueue_request(Request("http://example.com/1000")) is True
    assert crawlo_log(caplog) == ["Queue is full: http://example.com/1000 not queued"]


async def test_the_default_limit_is_ten_thousand() -> None:
    async with open_crawlo_scheduler({}) as scheduler:
        queued = await scheduler.enqueue_requests(Request(f"http://example.com/{i}") for i in range(10_001))
    assert queued == 10_000


async def test_crawlos_exception_names() -> None:
    assert QueueFullException is QueueFullError and FilterConnectionException is BackendUnavailableError
    async with open_scheduler("memory://", max_size=1) as queue:
        await queue.enqueue_request(Request("http://example.com/a"))
        with pytest.raises(QueueFullException):
            await queue.enqueue_request(Request("http://example.com/b"))


async def test_an_unreachable_redis_filter_is_a_filter_connection_exception() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    settings = {"FILTER_TYPE": "redis", "REDIS_PORT": port}
    async with open_crawlo_scheduler(settings) as scheduler:
        with pytest.raises(FilterConnectionException) as info:
            await scheduler.enqueue_request(Request("http://example.com/"))
    assert str(info.value).startswith(f"Redis duplicate filter at redis://127.0.0.1:{port}/0 (ConnectionError:")


# -- Redis: filter beside a memory queue; Redis queue -------------------------------------------------------------


async def test_memory_queue_with_a_redis_filter(redis_url: str, unique_name: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    where = urlsplit(redis_url)  # the test's Redis, not the seed's default one
    settings = settings_of("crawlo_04_redis_filter", PROJECT_NAME=unique_name, SCHEDULER_MAX_QUEUE_SIZE=2,
                           REDIS_HOST=where.hostname, REDIS_PORT=where.port or 6379)
    caplog.set_level(logging.DEBUG, logger="crawlherd.crawlo")
    try:
        async with open_crawlo_scheduler(settings) as a, open_crawlo_scheduler(settings) as b:
            # two processes' queues, one filter: what one queued, the other filters
            assert await a.enqueue_request(Request("http://example.com/1")) is True
            assert await b.enqueue_request(Request("http://example.com/1")) is False
            assert await a.size() == 1 and await b.size() == 0
            assert await a.enqueue_request(Request("http://example.com/2")) is True
            assert await a.enqueue_request(Request("http://example.com/3")) is False  # a's queue is full
            assert await b.enqueue_request(Request("http://example.com/3")) is True  # not recorded by a
            assert (await b.stats()).duplicates_filtered == 1
    finally:
        cleanup = RedisFingerprintFilter(redis_url, CrawloSettings.from_settings(settings).filter_key)
        assert await cleanup.size() == 3
        await cleanup._client.delete(cleanup.key)
        await cleanup.close()
    assert "Duplicate request filtered: http://example.com/1" in crawlo_log(caplog)
    assert "Queue is full: http://example.com/3 not queued" in crawlo_log(caplog)


async def test_split_frontier_batches(redis_url: str, unique_name: str) -> None:
    key = f"{unique_name}:dupefilter"
    split = SplitFrontier(open_scheduler("memory://", max_size=3), RedisFingerprintFilter(redis_url, key))
    async with split:
        urls = ["http://a.example/1", "http://a.example/1", "http://a.example/2"]
        assert await split.enqueue_requests(Request(u) for u in urls) == 2  # the repeat filtered
        with pytest.raises(QueueFullError):
            await split.enqueue_requests(Request(f"http://a.example/{i}") for i in (3, 4, 5))
        # 3 was queued; 4 (refused) and 5 (never tried) were taken back from the filter
        assert await split.filter.size() == 3
        assert (await split.stats()).duplicates_filtered == 1
        await split.filter._client.delete(key)


async def test_the_redis_filter_serves_more_calls_at_once_than_a_connection_pool_holds(
    redis_url: str, unique_name: str
) -> None:
    """A scheduler's requests checked at once: redis-py's default pool of 100 connections refused the
    101st ("Too many connections", a FilterConnectionException to Crawlo's code)."""
    flt = RedisFingerprintFilter(redis_url, f"{unique_name}:dupefilter")
    try:
        added = await asyncio.gather(*(flt.add(i.to_bytes(4, "big")) for i in range(300)))
        assert added == [True] * 300 and await flt.size() == 300
    finally:
        await flt._client.delete(flt.key)
        await flt.close()


@pytest.fixture
async def redis_with_password(tmp_path: Path) -> AsyncIterator[int]:
    """A redis-server of this test's own with ``requirepass password`` (the page's REDIS_PASSWORD)."""
    exe = require_tool("redis-server", "a Redis with a password of the test's own")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = await asyncio.create_subprocess_exec(
        exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--requirepass", "password", "--dir", str(tmp_path),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(20):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    await writer.wait_closed()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        async with asyncio.timeout(10):
            await proc.wait()


async def test_redis_queue_with_its_password(redis_with_password: int, caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_of("crawlo_02_redis_queue", REDIS_PORT=redis_with_password)
    page = seed("crawlo_11_priorities")
    async with open_crawlo_scheduler(settings) as scheduler:
        for request in (page.detail_request, page.list_request, page.homepage_request):
            assert await scheduler.enqueue_request(request) is True
        assert await scheduler.enqueue_request(seed("crawlo_05_priority").request) is False
        order = []
        while (lease := await scheduler.next_request()) is not None:
            order.append(lease.request.url)
            await scheduler.ack(lease)
    assert order == ["http://example.com", "http://example.com/list", "http://example.com/detail"]
    # FILTER_TYPE stays 'memory' (the page's default): said, since a Redis queue filters in Redis
    assert crawlo_log(caplog)[0].startswith("FILTER_TYPE='memory' with QUEUE_TYPE='redis'")


async def test_distributed_config_shares_queue_and_filter(redis_with_password: int) -> None:
    config = CrawloConfig.distributed(queue_type="redis", redis_port=redis_with_password, redis_password="password",
                                      project_name="shop")
    async with config.open_scheduler() as one, config.open_scheduler() as two:
        assert await one.enqueue_request(Request("http://example.com/p", priority=5)) is True
        assert await two.enqueue_request(Request("http://example.com/p")) is False  # filtered across processes
        lease = await two.next_request()  # queued by one, leased by two
        assert lease is not None and lease.request.url == "http://example.com/p"
        await two.ack(lease)
        assert await one.idle()


async def test_a_wrong_redis_password_is_told(redis_with_password: int) -> None:
    settings = settings_of("crawlo_02_redis_queue", REDIS_PORT=redis_with_password, REDIS_PASSWORD="wrong")
    with pytest.raises(BackendUnavailableError) as info:
        async with open_crawlo_scheduler(settings):
            pass
    assert str(info.value) == (
        f"redis frontier at redis://:***@127.0.0.1:{redis_with_password}/0?prefix=crawlherd is unavailable: "
        "invalid username-password pair or user is disabled."
    )
