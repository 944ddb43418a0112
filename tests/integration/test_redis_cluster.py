"""``redis+cluster://`` beyond the contract suites (which run the frontier and the broker against a
three-master cluster): the frontier with a master killed mid-crawl and acknowledged writes
(``wait_replicas``); the broker's key layout (one queue, one slot; queues over the masters) and a
dispatch-then-worker pass through it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from crawlherd.brokers import open_broker
from crawlherd.demo import DemoSite
from crawlherd.errors import BackendUnavailableError, ConfigurationError, LeaseError
from crawlherd.frontier import open_scheduler
from crawlherd.request import Request
from tests.support.cli import dumped, invoke, running_crawlherd, worker_status_until_done
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
                # each host could give its request at once: it is one of its shard's loose requests (gq)
                keys = [k async for k in client.scan_iter(match=f"{{{unique_name}.*:gq")]
                per_master.append([m for k in keys for m in await client.zrange(k, 0, -1)])
            finally:
                await client.aclose()
        assert all(per_master), per_master  # every master holds some hosts' requests
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
    with pytest.raises(ConfigurationError, match="not host:port"):
        open_broker("redis+cluster://127.0.0.1?prefix=x")
    with pytest.raises(ConfigurationError, match="must not contain braces"):
        open_broker("redis+cluster://127.0.0.1:7000?prefix={x}")
    with pytest.raises(ConfigurationError, match="database 0 only"):
        open_broker("redis+cluster://127.0.0.1:7000/3?prefix=x")


# -- the broker ------------------------------------------------------------------------------------


def _nodes(url: str) -> list[tuple[str, int]]:
    return [(h, int(p)) for h, _, p in (n.rpartition(":") for n in url.removeprefix("redis+cluster://").split(","))]


async def test_a_broker_queue_is_one_slot_and_queues_spread_over_the_masters(
    redis_cluster_url: str, unique_name: str
) -> None:
    """Every key of a queue (stream, delayed set and its data, dead-letter stream) on one master, in one
    slot; three queues whose names hash into the three masters' slot ranges live on three masters."""
    import redis.asyncio as aioredis
    from redis.crc import key_slot

    names: dict[int, str] = {}  # the cluster's masters split the 16,384 slots in three equal ranges
    for i in range(1000):
        name = f"{unique_name}-{i}"
        names.setdefault(key_slot(f"{name}:jobs".encode()) * 3 // 16384, name)
        if len(names) == 3:
            break
    for name in names.values():
        async with open_broker(f"{redis_cluster_url}?prefix={name}&block=0.05") as broker:
            await broker.publish(b"now", key="a")
            await broker.publish(b"later", key="b", delay=60)
            delivery = await asyncio.wait_for(anext(broker.consume()), 15)
            await broker.dead_letter(delivery, "layout")
            await broker.publish(b"left", key="c")
    holders: dict[str, list[tuple[int, list[bytes]]]] = {name: [] for name in names.values()}
    for host, port in _nodes(redis_cluster_url):
        client = aioredis.Redis(host=host, port=port)
        try:
            for name in names.values():
                keys = sorted([k async for k in client.scan_iter(match=f"{{{name}:jobs}}*")])
                if keys:
                    holders[name].append((port, keys))
        finally:
            await client.aclose()
    for name, found in holders.items():
        (_, keys), = found  # one master holds them all
        tag = f"{{{name}:jobs}}"
        assert keys == [k.encode() for k in (tag, f"{tag}:dead", f"{tag}:delayed", f"{tag}:delayed:data")]
        assert {key_slot(k) for k in keys} == {key_slot(tag.encode())}
    assert len({found[0][0] for found in holders.values()}) == 3  # three queues, three masters


async def test_a_live_cluster_client_is_used_and_not_closed(redis_cluster_url: str, unique_name: str) -> None:
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in _nodes(redis_cluster_url)])
    try:
        async with open_broker(f"redis://unused/0?prefix={unique_name}", client=client) as broker:
            await broker.publish(b"x", key="k")
        assert await client.xlen(f"{{{unique_name}:jobs}}") == 1  # a cluster client: the keys get the hash tag
        await client.delete(f"{{{unique_name}:jobs}}")
    finally:
        await client.aclose()


@pytest.mark.timeout(60)
async def test_a_broker_follows_its_queue_to_the_promoted_replica(
    replicated_cluster: LocalCluster, unique_name: str
) -> None:
    """The master of a queue's slot killed with SIGKILL: publishing fails with BackendUnavailableError
    until its replica took over, then the same broker object publishes and consumes there, and the
    message the replica had before the kill is delivered."""
    import redis.asyncio as aioredis

    cluster = replicated_cluster
    stream = f"{{{unique_name}:jobs}}"
    async with open_broker(f"{cluster.url}?prefix={unique_name}&block=0.05&connect_timeout=1") as broker:
        await broker.publish(b"before", key="a")
        master = cluster.master_of(stream)
        client = aioredis.Redis(port=master)
        try:
            replica = aioredis.Redis(port=int((await client.info("replication"))["slave0"]["port"]))
        finally:
            await client.aclose()
        try:  # the master's replica has the message (replication is asynchronous)
            await replica.execute_command("READONLY")
            async with asyncio.timeout(15):
                while await replica.xlen(stream) != 1:  # noqa: ASYNC110 - replication: no event to await
                    await asyncio.sleep(0.05)
        finally:
            await replica.aclose()
        cluster.kill(master)
        await retrying(lambda: broker.publish(b"after", key="b"))  # on the promoted replica: the master is dead
        got = []
        async with asyncio.timeout(15):
            it = broker.consume(prefetch=5)
            while len(got) < 2:
                delivery = await anext(it)
                got.append(delivery.body)
                await broker.ack(delivery)
        assert sorted(got) == [b"after", b"before"]
        assert await broker.pending() == 0


@pytest.mark.timeout(180)
async def test_dispatch_once_then_a_worker_through_a_cluster_broker(
    demo_pipeline: tuple[DemoSite, dict[str, str], int], redis_cluster_url: str, unique_name: str
) -> None:
    """``crawlherd dispatch --once`` publishes the due jobs to a ``redis+cluster://`` broker; a
    ``crawlherd worker`` on the same URL consumes them and every job succeeds."""
    _, env, items = demo_pipeline
    env = {**env, "CRAWLHERD_BROKER_URL": f"{redis_cluster_url}?prefix={unique_name}"}
    code, out, err = await invoke("dispatch", "--once", "--json", env=env)
    assert code == 0 and json.loads(out)["published"] == 2, err
    async with open_broker(env["CRAWLHERD_BROKER_URL"]) as broker:
        assert await broker.pending() == 2  # on the cluster, waiting for the worker
    async with running_crawlherd("worker", "--allow-private", env=env) as proc:
        assert proc.stderr is not None
        banner = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        assert banner.startswith("worker "), banner
        assert await worker_status_until_done(proc.stderr, 2) == items
        proc.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0
    stats = dumped(rest.decode(), f"worker stopped ({banner.split()[1].rstrip(':')}); statistics")
    assert stats["jobs/received"] == 2 and stats["jobs/succeeded"] == 2 and stats["items/new"] == items
    async with open_broker(env["CRAWLHERD_BROKER_URL"]) as broker:
        assert await broker.pending() == 0 and await broker.dead_letters() == []
