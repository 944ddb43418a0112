"""The ``redis+cluster://`` frontier beyond the contract suite (which runs against a three-master cluster):
a master killed mid-crawl, acknowledged writes (``wait_replicas``)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from crawlherd.errors import BackendUnavailableError, ConfigurationError, LeaseError
from crawlherd.frontier import open_scheduler
from crawlherd.request import Request
from tests.support.rediscluster import LocalCluster

pytestmark = pytest.mark.redis
_T = TypeVar("_T")


@pytest.fixture
def replicated_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """Three masters, one replica each, a 1 s node timeout: a dead master's replica takes over in seconds."""
    cluster = LocalCluster(tmp_path, masters=3, replicas=1, node_timeout_ms=1000)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


async def retrying(op: Callable[[], Awaitable[_T]]) -> _T:
    """What a worker does with BackendUnavailableError: wait a little and try again."""
    while True:
        try:
            return await op()
        except BackendUnavailableError:
            await asyncio.sleep(0.1)


@pytest.mark.timeout(60)
async def test_a_master_killed_mid_crawl_loses_no_page(replicated_cluster: LocalCluster, unique_name: str) -> None:
    cluster = replicated_cluster
    pages = 400  # page i links to 2i+1 and 2i+2: a chained crawl over 20 hosts, enqueues all along
    url = f"{cluster.url}?prefix={unique_name}&wait_replicas=1&wait_timeout=2"

    def page(i: int) -> Request:
        return Request(f"http://h{i % 20}.test/p/{i}")

    key = f"{{{unique_name}}}:cfg"

    def restart_after_failover(port: int) -> None:
        # the promoted replica has no replica of its own, so writes wait (wait_replicas=1) until the old
        # master, started again as a supervisor would, rejoins as its replica
        cluster._wait(lambda: cluster.master_of(key) != port, "no failover")
        cluster.restart(port)

    fetched: set[str] = set()
    killed = None
    restarted: asyncio.Task[None] | None = None
    async with open_scheduler(url, lease_timeout=3.0) as frontier:
        await retrying(lambda: frontier.enqueue_requests([page(0)]))
        while True:
            leases = await retrying(lambda: frontier.next_requests(10))
            if not leases:
                if await retrying(frontier.idle):
                    break
                await asyncio.sleep(0.05)
                continue
            children = []
            for lease in leases:
                fetched.add(lease.request.url)
                i = int(lease.request.url.rsplit("/", 1)[1])
                children += [page(c) for c in (2 * i + 1, 2 * i + 2) if c < pages]
            await retrying(functools.partial(frontier.enqueue_requests, children))
            # LeaseError: the ack was applied, its reply lost in the failover; or the lease expired (fetched again)
            with contextlib.suppress(LeaseError):
                await retrying(functools.partial(frontier.ack_many, leases))
            if killed is None and len(fetched) >= pages // 3:
                killed = cluster.master_of(key)
                cluster.kill(killed)  # SIGKILL, by PID; the crawl goes on retrying meanwhile
                restarted = asyncio.create_task(asyncio.to_thread(restart_after_failover, killed))
        stats = await retrying(frontier.stats)
    assert killed is not None and restarted is not None
    await restarted
    assert cluster.master_of(key) != killed  # its replica took over
    assert fetched == {page(i).url for i in range(pages)}
    assert stats.queued == 0 and stats.in_flight == 0


async def test_hosts_are_sharded_over_every_master(redis_cluster_url: str, unique_name: str) -> None:
    import redis.asyncio as aioredis

    async with open_scheduler(f"{redis_cluster_url}?prefix={unique_name}") as frontier:
        assert await frontier.enqueue_requests(Request(f"http://h{i}.test/") for i in range(60)) == 60
        per_master = []
        for node in redis_cluster_url.removeprefix("redis+cluster://").split(","):
            host, port = node.rsplit(":", 1)
            client = aioredis.Redis(host=host, port=int(port))
            try:
                per_master.append([k async for k in client.scan_iter(match=f"{{{unique_name}.*:q:*")])
            finally:
                await client.aclose()
        assert all(per_master), per_master  # every master holds some hosts' queues
        assert sum(map(len, per_master)) == 60
        leased = await frontier.next_requests(100)
        assert sorted(lease.request.url for lease in leased) == sorted(f"http://h{i}.test/" for i in range(60))
        await frontier.ack_many(leased)
        assert await frontier.idle()
    reopened = open_scheduler(f"{redis_cluster_url}?prefix={unique_name}&shards=5")
    with pytest.raises(ConfigurationError, match="created with shards=12"):
        async with reopened:
            pass


async def test_a_shared_counter_set_back_by_a_failover_reuses_no_id(redis_cluster_url: str, unique_name: str) -> None:
    import redis.asyncio as aioredis

    async with open_scheduler(f"{redis_cluster_url}?prefix={unique_name}&max_in_flight=100") as frontier:
        await frontier.enqueue_requests(Request(f"http://one.test/a{i}") for i in range(5))
        # the counter's last writes lost (a failover before they reached a replica): it counts from 0 again
        cluster = aioredis.RedisCluster.from_url(redis_cluster_url.replace("redis+cluster", "redis").split(",")[0])
        try:
            await cluster.set(f"{{{unique_name}}}:seq", 0)
        finally:
            await cluster.aclose()
        await frontier.enqueue_requests(Request(f"http://one.test/b{i}") for i in range(5))
        leased = await frontier.next_requests(20)
        assert [lease.request.url.rsplit("/", 1)[1] for lease in leased] == [f"a{i}" for i in range(5)] + [
            f"b{i}" for i in range(5)
        ]
        await frontier.ack_many(leased)  # ten leases, ten ids: none overwrote another
        assert await frontier.idle()


async def test_wait_replicas_without_replicas_is_unavailable_not_silent(
    redis_cluster_url: str, unique_name: str
) -> None:
    url = f"{redis_cluster_url}?prefix={unique_name}&wait_replicas=1&wait_timeout=0.05"
    frontier = open_scheduler(url)
    with pytest.raises(BackendUnavailableError, match="reached 0 of the 1 replica"):
        async with frontier:
            pass


def test_cluster_url_mistakes_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="not host:port"):
        open_scheduler("redis+cluster://127.0.0.1?prefix=x")
    with pytest.raises(ConfigurationError, match="wait_replicas"):
        open_scheduler("redis+cluster://127.0.0.1:7000?wait_replicas=-1")
