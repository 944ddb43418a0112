"""The broker contract: the same assertions for every broker, on the real services of this machine.

Each backend joins through :class:`Harness`: how to open a broker on the test's own queue, how to make a
dead consumer's leases come back (advance the fake clock, wait out Redis' ``claim_idle``, nothing for
RabbitMQ where the channel closing does it), how to kill a consumer without letting it say goodbye,
and an address where the broker cannot be reached.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from crawlherd.brokers import Broker, Delivery, open_broker
from crawlherd.clock import FakeClock
from crawlherd.errors import BackendUnavailableError, BrokerError, PublishError
from tests.support.real_brokers import delete_queues

from .._netutil import TcpProxy, free_port
from ..support.sqs_server import delete_queues as delete_sqs_queues
from ..support.sqs_server import sqs_url

BROKERS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis),
           pytest.param("redis-cluster", marks=pytest.mark.redis),
           pytest.param("amqp", marks=pytest.mark.rabbitmq), pytest.param("sqs", marks=pytest.mark.sqs),
           pytest.param("sqs-fifo", marks=pytest.mark.sqs)]
GUARD = 15.0  # seconds: a guard against hanging, never an assertion on speed


class Harness:
    """One backend, one queue (unique to the test)."""

    def __init__(self, kind: str, url: str, clock: FakeClock | None, unreachable_url: str | None,
                 defaults: dict[str, Any]) -> None:
        self.kind = kind
        self.url = url
        self.clock = clock
        self.unreachable_url = unreachable_url
        self.defaults = defaults
        self.opened: list[Broker] = []
        self.proxies: list[TcpProxy] = []

    async def open(self, **options: Any) -> Broker:
        """An entered broker on the test's queue (each call: another client of the same queue)."""
        merged = {**self.defaults, **options}
        broker = await open_broker(self.url, **merged).__aenter__()
        self.opened.append(broker)
        return broker

    async def open_doomed(self) -> Broker:
        """A broker that :meth:`crash` can kill (RabbitMQ: its connection runs through a proxy)."""
        if self.kind != "amqp":
            return await self.open()
        proxy = await TcpProxy("127.0.0.1", 5672).__aenter__()
        self.proxies.append(proxy)
        url = self.url.replace("127.0.0.1:5672", f"127.0.0.1:{proxy.port}")
        assert url != self.url
        broker = await open_broker(url, **self.defaults).__aenter__()
        self.opened.append(broker)
        return broker

    def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` pass for brokers on the fake clock (real-time brokers just get waited on)."""
        if self.clock is not None:
            self.clock.advance(seconds)

    async def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass: on the fake clock for the brokers that run on it, else really."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    async def expire_leases(self) -> None:
        """Make the leases of a consumer that died run out."""
        if self.clock is not None:
            self.clock.advance(self.defaults["visibility_timeout"] + 1)
        elif self.kind == "redis":
            await asyncio.sleep(self.defaults["claim_idle"] * 2)
        elif self.kind.startswith("sqs"):
            await asyncio.sleep(self.defaults["visibility_timeout"] + 0.5)

    async def crash(self, broker: Broker) -> None:
        """The consumer dies: no settle, no close (for RabbitMQ: its TCP connection drops)."""
        if self.kind == "amqp":
            for proxy in self.proxies:
                await proxy.down()
        elif self.kind.startswith("sqs"):  # it stops extending its messages' visibility
            task = broker._heartbeat_task  # type: ignore[attr-defined]
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def released(self, broker: Broker) -> bool:
        """Did ``broker`` release what it opened?"""
        b: Any = broker
        if self.kind == "memory":
            return b._store is None
        if self.kind == "sqlite":
            return b._db is None
        if self.kind == "redis" or self.kind.startswith("sqs"):
            return b._client is None
        return b._connection is None


@pytest.fixture(params=BROKERS)
async def harness(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> AsyncIterator[Harness]:
    kind = str(request.param)
    port = free_port()
    if kind == "memory":
        h = Harness(kind, f"memory://{unique_name}", FakeClock(), None,
                    {"clock": None, "visibility_timeout": 30.0})
    elif kind == "sqlite":
        h = Harness(kind, f"sqlite:///{tmp_path / 'broker.db'}?queue={unique_name}", FakeClock(),
                    f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}",
                    {"clock": None, "visibility_timeout": 30.0, "poll_interval": 0.01})
    elif kind.startswith("redis"):  # redis-cluster: the same broker on a private Redis Cluster of 3 masters
        cluster = kind == "redis-cluster"
        redis_url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
        h = Harness("redis", f"{redis_url}?prefix={unique_name}", None,
                    f"{'redis+cluster' if cluster else 'redis'}://127.0.0.1:{port}/0?prefix={unique_name}",
                    {"claim_idle": 0.3, "block": 0.05, "connect_timeout": 2.0})
    elif kind.startswith("sqs"):
        endpoint = request.getfixturevalue("sqs_endpoint")
        queue = unique_name + (".fifo" if kind == "sqs-fifo" else "")
        h = Harness(kind, sqs_url(endpoint, queue), None, sqs_url(f"http://127.0.0.1:{port}", queue),
                    {"visibility_timeout": 3, "wait_time": 1, "connect_timeout": 2.0, "max_attempts": 1})
    else:
        amqp_url = request.getfixturevalue("amqp_url")
        h = Harness(kind, f"{amqp_url}?queue={unique_name}", None,
                    f"amqp://guest:guest@127.0.0.1:{port}/?queue={unique_name}", {"connect_timeout": 3.0})
    if h.clock is not None:
        h.defaults["clock"] = h.clock
    try:
        yield h
    finally:
        for broker in h.opened:
            await broker.close()
            await broker.close()  # idempotent
            assert h.released(broker), f"{broker!r} did not release what it opened"
        for proxy in h.proxies:
            await proxy.down()
        await _cleanup(h, unique_name, request)


async def _cleanup(h: Harness, unique_name: str, request: pytest.FixtureRequest) -> None:
    if h.kind == "redis" and h.url.startswith("redis+cluster://"):
        from redis.asyncio.cluster import RedisCluster

        client = RedisCluster.from_url("redis://" + h.url.split("//", 1)[1].split(",", 1)[0].split("?", 1)[0])
        try:  # the queue's keys share its hash tag: one slot, one multi-key DELETE
            keys = [k async for k in client.scan_iter(match=f"{{{unique_name}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
    elif h.kind == "redis":
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"))
        try:
            keys = [k async for k in client.scan_iter(match=f"{unique_name}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
    elif h.kind.startswith("sqs"):
        queue = unique_name + (".fifo" if h.kind == "sqs-fifo" else "")
        dead = f"{unique_name}-dead" + (".fifo" if h.kind == "sqs-fifo" else "")
        await delete_sqs_queues(request.getfixturevalue("sqs_endpoint"), queue, dead)
    elif h.kind == "amqp":
        async with open_broker(h.url) as cleaner:
            names: set[str] = set()
            for broker in h.opened:
                names.update(broker.declared_queues)  # type: ignore[attr-defined]
            await delete_queues(cleaner, extra=names)


async def take(it: AsyncIterator[Delivery]) -> Delivery:
    async with asyncio.timeout(GUARD):
        return await anext(it)


# -- publish, consume, settle ----------------------------------------------------------------------


async def test_publish_consume_ack_round_trip(harness: Harness) -> None:
    broker = await harness.open()
    body = bytes(range(256))
    await broker.publish(body, key="17:2026-11-21T15:00:00+00:00", headers={"content-type": "application/json",
                                                                             "note": "café ✓"})
    await broker.publish(b"second", key="18:x")
    assert await broker.pending() == 2
    it = broker.consume(prefetch=5)
    first = await take(it)
    assert (first.body, first.key, dict(first.headers), first.redelivered) == (
        body, "17:2026-11-21T15:00:00+00:00", {"content-type": "application/json", "note": "café ✓"}, False)
    second = await take(it)
    assert (second.body, second.key, dict(second.headers)) == (b"second", "18:x", {})
    await broker.ack(first)
    await broker.ack(second)
    assert await broker.pending() == 0
    await broker.close()
    # acked messages are gone for good: a new consumer's first delivery is the next message published
    other = await harness.open()
    await other.publish(b"sentinel", key="s")
    got = await take(other.consume())
    assert got.body == b"sentinel"
    await other.ack(got)


async def test_many_publishers_one_queue_fifo(harness: Harness) -> None:
    a, b = await harness.open(), await harness.open()
    for i in range(10):
        await (a if i % 2 else b).publish(str(i).encode(), key=f"k{i}")
    it = b.consume(prefetch=3)
    seen = []
    for _ in range(10):
        d = await take(it)
        seen.append(d.body.decode())
        await b.ack(d)
    assert seen == [str(i) for i in range(10)]


async def test_concurrent_publishes_are_all_confirmed_and_delivered(harness: Harness) -> None:
    broker = await harness.open()
    keys = [f"t{i}:slot" for i in range(60)]
    await asyncio.gather(*(broker.publish(k.encode(), key=k) for k in keys))
    assert await broker.pending() == 60
    got = []
    it = broker.consume(prefetch=20)
    for _ in keys:
        d = await take(it)
        got.append(d.key)
        await broker.ack(d)
    assert sorted(got) == sorted(keys)
    assert await broker.pending() == 0


async def test_nack_requeue_redelivers(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b"job", key="k1", headers={"h": "v"})
    it = broker.consume()
    d = await take(it)
    assert not d.redelivered
    await broker.nack(d, requeue=True)
    again = await take(it)
    assert (again.body, again.key, dict(again.headers), again.redelivered) == (b"job", "k1", {"h": "v"}, True)
    await broker.ack(again)
    assert await broker.pending() == 0


async def test_nack_without_requeue_goes_to_dead_letters(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b"poison", key="k-poison", headers={"h": "1"})
    d = await take(broker.consume())
    await broker.nack(d, requeue=False)
    dead = await broker.dead_letters()
    assert [(x.body, x.key, x.reason, dict(x.headers)) for x in dead] == [(b"poison", "k-poison", "nacked", {"h": "1"})]
    assert await broker.pending() == 0


async def test_settling_twice_raises(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b"x", key="k")
    d = await take(broker.consume())
    await broker.ack(d)
    with pytest.raises(BrokerError):
        await broker.ack(d)
    with pytest.raises(BrokerError):
        await broker.nack(d)
    with pytest.raises(BrokerError):
        await broker.dead_letter(d, "late")
    assert await broker.dead_letters() == []


async def test_retry_later_with_new_body(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b'{"attempt_count": 0}', key="t1:slot", headers={"h": "v"})
    await broker.publish(b"next", key="t2:slot")
    it = broker.consume(prefetch=5)
    first = await take(it)
    await broker.retry(first, delay=0.2, body=b'{"attempt_count": 1}')
    if harness.clock is not None:
        assert await broker.pending() == 0  # "next" is leased already; the retried one is not due yet
    second = await take(it)
    assert second.body == b"next"
    await broker.ack(second)
    harness.pass_time(0.25)
    again = await take(it)
    assert (again.body, again.key, dict(again.headers)) == (b'{"attempt_count": 1}', "t1:slot", {"h": "v"})
    await broker.ack(again)
    assert await broker.pending() == 0


async def test_delayed_publish(harness: Harness) -> None:
    """A delayed message is not delivered before its delay: on a real clock, "later" may come first only
    once its 0.2 s are up (a busy machine can take longer than that between publish and receive)."""
    broker = await harness.open()
    published = time.monotonic()
    await broker.publish(b"later", key="l", delay=0.2)
    await broker.publish(b"now", key="n")
    if harness.clock is not None or harness.kind == "redis":
        pending = await broker.pending()
        assert pending == 1 or (harness.clock is None and time.monotonic() - published >= 0.2), pending
    it = broker.consume()
    got = []
    for _ in range(2):
        d = await take(it)
        if d.body == b"later":
            assert harness.clock is not None or time.monotonic() - published >= 0.2
        got.append(d.body)
        await broker.ack(d)
        harness.pass_time(0.25)
    assert sorted(got) == [b"later", b"now"]
    if harness.clock is not None:
        assert got == [b"now", b"later"]  # its clock stood still until pass_time


async def test_retry_without_delay_and_body_keeps_message(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b"same", key="k", headers={"a": "b"})
    it = broker.consume()
    d = await take(it)
    await broker.retry(d, delay=0)
    again = await take(it)
    assert (again.body, again.key, dict(again.headers)) == (b"same", "k", {"a": "b"})
    await broker.ack(again)


# -- dead letters ------------------------------------------------------------------------------------


async def test_dead_letter_list_and_requeue(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b"one", key="k1", headers={"x": "1"})
    await broker.publish(b"two", key="k2")
    it = broker.consume(prefetch=5)
    d1, d2 = await take(it), await take(it)
    await broker.dead_letter(d1, "unknown schema_version 9")
    await broker.dead_letter(d2, "bad json")
    assert await broker.pending() == 0
    dead = await broker.dead_letters()
    assert [(x.body, x.key, x.reason, dict(x.headers)) for x in dead] == [
        (b"one", "k1", "unknown schema_version 9", {"x": "1"}), (b"two", "k2", "bad json", {})]
    assert all(x.dead_at is not None for x in dead)
    assert len({x.dead_id for x in dead}) == 2
    assert [x.key for x in await broker.dead_letters(limit=1)] == ["k1"]
    # listing does not consume them
    assert len(await broker.dead_letters()) == 2

    assert await broker.requeue_dead(dead[1].dead_id) == 1
    back = await take(it)
    assert (back.body, back.key) == (b"two", "k2")
    await broker.ack(back)
    assert [x.key for x in await broker.dead_letters()] == ["k1"]
    assert await broker.requeue_dead("no-such-id") == 0
    assert await broker.requeue_dead() == 1
    back = await take(it)
    assert (back.body, back.key, dict(back.headers)) == (b"one", "k1", {"x": "1"})
    await broker.ack(back)
    assert await broker.dead_letters() == []


# -- unsettled deliveries come back ------------------------------------------------------------------


async def test_unsettled_delivery_returns_when_consumer_closes(harness: Harness) -> None:
    publisher = await harness.open()
    await publisher.publish(b"job", key="k")
    consumer = await harness.open()
    d = await take(consumer.consume())
    await consumer.close()
    with pytest.raises(BrokerError):
        await consumer.ack(d)
    other = await harness.open()
    again = await take(other.consume())
    assert (again.body, again.key, again.redelivered) == (b"job", "k", True)
    await other.ack(again)


async def test_unsettled_delivery_of_dead_consumer_is_delivered_again(harness: Harness) -> None:
    publisher = await harness.open()
    await publisher.publish(b"job", key="k")
    doomed = await harness.open_doomed()
    d = await take(doomed.consume())
    await harness.crash(doomed)
    await harness.expire_leases()
    survivor = await harness.open()
    again = await take(survivor.consume())
    assert (again.body, again.key, again.redelivered) == (b"job", "k", True)
    await survivor.ack(again)
    # the dead consumer's late settle does not count
    with pytest.raises((BrokerError, BackendUnavailableError)):
        await doomed.ack(d)
    assert await survivor.pending() == 0


async def test_unsettled_delivery_survives_end_of_consume_loop(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b"job", key="k")
    async for d in broker.consume():
        held = d
        break
    await broker.ack(held)
    assert await broker.pending() == 0


async def test_closing_the_consume_loop_gives_back_what_it_did_not_hand_out(harness: Harness) -> None:
    broker = await harness.open()
    for i in range(3):
        await broker.publish(str(i).encode(), key=f"k{i}")
    it = broker.consume(prefetch=10)
    held = await take(it)
    await it.aclose()
    # Redis: the claimer's claim_idle counts; the harness's 0.3 s would let a slow machine claim ``held``.
    other = await harness.open(**({"claim_idle": 30.0} if harness.kind == "redis" else {}))
    got = []
    it2 = other.consume()
    for _ in range(2):
        d = await take(it2)
        got.append(d.body)
        await other.ack(d)
    assert sorted(got) == [b"1", b"2"]
    await broker.ack(held)
    assert await broker.pending() == 0


# -- leases ------------------------------------------------------------------------------------------


async def test_lease_says_how_long_a_claim_lasts_untouched(harness: Harness) -> None:
    """``lease`` is the broker's claim length (None where nothing runs out on the client's side: RabbitMQ
    holds a delivery for its channel's life, the SQS broker extends what it holds itself)."""
    broker = await harness.open()
    assert isinstance(broker, Broker)
    expected = {"memory": 30.0, "sqlite": 30.0, "redis": 0.3}.get(harness.kind)
    assert broker.lease == expected


async def test_touch_keeps_a_delivery_past_its_lease(harness: Harness) -> None:
    """A consumer that touches its delivery every half lease keeps it for twice the lease: another
    consumer gets the next message, never this one; the touched delivery still settles."""
    options = {"claim_idle": 1.0} if harness.kind == "redis" else {}  # the claimer's claim_idle counts
    holder = await harness.open(**options)
    await holder.publish(b"long job", key="long")
    held = holder.consume(prefetch=1)  # RabbitMQ pushes no more to a consumer at its prefetch
    d = await take(held)
    await holder.publish(b"next", key="next")
    other = await harness.open(**options)
    lease = holder.lease
    assert lease is None or lease == options.get("claim_idle", lease)
    for _ in range(4 if lease is not None else 1):
        if lease is not None:
            await harness.wait(lease / 2)
        await holder.touch(d)
    got = await take(other.consume())
    assert (got.body, got.key, got.redelivered) == (b"next", "next", False)
    await other.ack(got)
    await holder.ack(d)
    await held.aclose()
    assert await other.pending() == 0


async def test_touch_refuses_a_delivery_this_broker_does_not_hold(harness: Harness) -> None:
    broker = await harness.open()
    await broker.publish(b"x", key="k1")
    await broker.publish(b"y", key="k2")
    it = broker.consume(prefetch=5)
    d1, d2 = await take(it), await take(it)
    other = await harness.open()
    with pytest.raises(BrokerError):
        await other.touch(d1)  # delivered by another broker object
    await broker.touch(d1)  # held: extended (or checked), nothing else changes
    await broker.ack(d1)
    with pytest.raises(BrokerError):
        await broker.touch(d1)  # settled
    await broker.close()
    with pytest.raises(BrokerError):
        await broker.touch(d2)  # given back when the broker closed
    again = await take(other.consume())
    assert (again.key, again.redelivered) == ("k2", True)
    await other.ack(again)


async def test_touch_after_the_claim_was_lost_raises(harness: Harness) -> None:
    """A consumer that stopped extending (it hung, or lost its connection) has lost the claim once
    another consumer got the message: its touch raises instead of taking the message back."""
    publisher = await harness.open()
    await publisher.publish(b"job", key="k")
    doomed = await harness.open_doomed()
    d = await take(doomed.consume())
    await harness.crash(doomed)
    await harness.expire_leases()
    survivor = await harness.open()
    again = await take(survivor.consume())
    assert (again.key, again.redelivered) == ("k", True)
    with pytest.raises((BrokerError, BackendUnavailableError)):
        await doomed.touch(d)
    await survivor.ack(again)
    assert await survivor.pending() == 0


async def test_a_stale_holders_settle_is_refused_and_changes_nothing(harness: Harness) -> None:
    """A consumer that hung past its lease lost the delivery to another one: when it resumes, its settle
    is refused -- it neither removes nor requeues nor dead-letters what the new holder works on -- and
    the new holder's claim stands (fencing: the settle checks who holds the delivery now)."""
    publisher = await harness.open()
    for key in ("a", "r", "d"):
        await publisher.publish(key.encode(), key=key)
    doomed = await harness.open_doomed()
    it = doomed.consume(prefetch=3)
    stale = {d.key: d for d in [await take(it), await take(it), await take(it)]}
    await harness.crash(doomed)
    await harness.expire_leases()
    survivor = await harness.open()
    it2 = survivor.consume(prefetch=3)
    taken = {d.key: d for d in [await take(it2), await take(it2), await take(it2)]}
    assert sorted(taken) == ["a", "d", "r"]
    with pytest.raises((BrokerError, BackendUnavailableError)):
        await doomed.ack(stale["a"])
    with pytest.raises((BrokerError, BackendUnavailableError)):
        await doomed.retry(stale["r"], delay=0.0, body=b"again")
    with pytest.raises((BrokerError, BackendUnavailableError)):
        await doomed.dead_letter(stale["d"], "resumed")
    for d in taken.values():
        await survivor.touch(d)  # still the survivor's
        await survivor.ack(d)
    assert await survivor.pending() == 0
    assert await survivor.dead_letters() == []


async def test_default_lease_bounds_a_dead_consumers_claim_to_the_liveness_bound(harness: Harness) -> None:
    """With every option at its default, an unsettled delivery of a consumer that died comes back within
    about 15 s (a live worker extends its claim every third of the lease): not after a bound sized for
    the longest job. RabbitMQ holds it for the channel's life; the SQS broker extends what it holds."""
    async with open_broker(harness.url) as broker:
        assert broker.lease is None or broker.lease <= 15.0


# -- prefetch ----------------------------------------------------------------------------------------


async def test_prefetch_bounds_unsettled_deliveries(harness: Harness) -> None:
    broker = await harness.open()
    for i in range(5):
        await broker.publish(str(i).encode(), key=f"k{i}")
    it = broker.consume(prefetch=2)
    a, b = await take(it), await take(it)
    nxt = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.3)  # room for a consumer that ignored the bound to take more
    harness.pass_time(1.0)
    await asyncio.sleep(0.05)
    assert not nxt.done()
    assert await broker.pending() == 3
    await broker.ack(a)
    async with asyncio.timeout(GUARD):
        c = await nxt
    assert c.body == b"2"
    assert await broker.pending() == 2
    for d in (b, c):
        await broker.ack(d)


# -- confirms, failures, shutdown --------------------------------------------------------------------


async def test_publish_raises_when_broker_unreachable(harness: Harness) -> None:
    if harness.unreachable_url is None:  # memory:// is in-process: its fault switch makes it unreachable
        down = await harness.open()
        down.set_down()  # type: ignore[attr-defined]
        with pytest.raises(BackendUnavailableError):
            await down.publish(b"x", key="k")
        return
    broker = open_broker(harness.unreachable_url, **harness.defaults)
    with pytest.raises((BackendUnavailableError, PublishError)):
        async with broker:
            await broker.publish(b"x", key="k")
    await broker.close()


async def test_bad_publish_arguments_are_refused_and_nothing_published(harness: Harness) -> None:
    broker = await harness.open()
    with pytest.raises(TypeError):
        await broker.publish("text", key="k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key"):
        await broker.publish(b"x", key="")
    with pytest.raises(ValueError, match="delay"):
        await broker.publish(b"x", key="k", delay=-1)
    with pytest.raises(TypeError, match="headers"):
        await broker.publish(b"x", key="k", headers={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="reserved"):
        await broker.publish(b"x", key="k", headers={"x-crawlherd-key": "y"})
    with pytest.raises(ValueError, match="prefetch"):
        await anext(broker.consume(prefetch=0))
    assert await broker.pending() == 0


async def test_close_stops_consumers_and_is_idempotent(harness: Harness) -> None:
    broker = await harness.open()
    got: list[Delivery] = []

    async def consumer() -> None:
        async for d in broker.consume():
            got.append(d)

    task = asyncio.create_task(consumer(), name="consumer")
    await asyncio.sleep(0.1)
    await broker.close()
    async with asyncio.timeout(GUARD):
        await task  # ends by itself, no error
    await broker.close()
    assert got == []
    assert harness.released(broker)
    with pytest.raises(BrokerError):
        await broker.publish(b"x", key="k")


async def test_cancelled_consumer_stops_and_broker_goes_on(harness: Harness) -> None:
    broker = await harness.open()

    async def consumer() -> None:
        async for _ in broker.consume():
            pass

    task = asyncio.create_task(consumer(), name="consumer")
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await broker.publish(b"after", key="k")
    d = await take(broker.consume())
    assert d.body == b"after"
    await broker.ack(d)
