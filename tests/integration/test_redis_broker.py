"""Redis specifics beyond the contract: the key layout, a live client, the dead-letter stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from crawlherd.brokers.redis import RedisBroker
from crawlherd.errors import ConfigurationError

pytestmark = pytest.mark.redis
GUARD = 15.0


@pytest.fixture
async def client(redis_url: str, unique_name: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    try:
        yield c
    finally:
        keys = [k async for k in c.scan_iter(match=f"{unique_name}*")]
        if keys:
            await c.delete(*keys)
        await c.aclose()


async def test_stream_layout_and_dead_letter_stream(redis_url: str, unique_name: str,
                                                    client: aioredis.Redis) -> None:
    stream = f"{unique_name}.jobs"
    async with RedisBroker.from_url(f"{redis_url}?stream={stream}&group=workers") as broker:
        await broker.publish(b"body", key="t1:s1", headers={"a": "b"})
        await broker.publish(b"later", key="t2:s1", delay=30)
        assert await client.xlen(stream) == 1
        assert await client.zcard(f"{stream}:delayed") == 1
        groups = await client.xinfo_groups(stream)
        assert [g["name"] for g in groups] == [b"workers"]
        d = await anext(broker.consume())
        await broker.dead_letter(d, "bad schema")
        assert await client.xlen(stream) == 0  # settled entries are deleted
        (entry_id, fields), = await client.xrange(f"{stream}:dead")
        assert (fields[b"k"], fields[b"b"], fields[b"r"]) == (b"t1:s1", b"body", b"bad schema")
        assert entry_id.decode() == (await broker.dead_letters())[0].dead_id


async def test_poison_message_is_dead_lettered_after_max_deliveries(redis_url: str, unique_name: str,
                                                                    client: aioredis.Redis) -> None:
    url = f"{redis_url}?prefix={unique_name}&claim_idle=0.1&block=0.05&max_deliveries=2"
    brokers = []
    try:
        for _ in range(2):  # two consumers die holding it
            b = await RedisBroker.from_url(url).__aenter__()
            brokers.append(b)
            if not brokers[1:]:
                await b.publish(b"kills workers", key="poison")
            async with asyncio.timeout(GUARD):
                d = await anext(b.consume())
            assert d.key == "poison"
        third = await RedisBroker.from_url(url).__aenter__()
        brokers.append(third)
        consumer = asyncio.ensure_future(anext(third.consume()))
        async with asyncio.timeout(GUARD):
            while not (dead := await third.dead_letters()):  # noqa: ASYNC110 - server state: no event to await
                await asyncio.sleep(0.05)
        assert [(x.key, x.reason) for x in dead] == [("poison", "delivered 2 times without being settled")]
        assert not consumer.done()
        consumer.cancel()
        assert await third.pending() == 0
    finally:
        for b in brokers:
            await b.close()


async def test_live_client_is_used_and_not_closed(redis_url: str, unique_name: str,
                                                  client: aioredis.Redis) -> None:
    async with RedisBroker.from_url(f"{redis_url}?prefix={unique_name}", client=client) as broker:
        await broker.publish(b"x", key="k")
    assert await client.ping()
    assert await client.xlen(f"{unique_name}:jobs") == 1


async def test_more_calls_at_once_than_redis_pys_default_pool_are_not_an_outage(
    redis_url: str, unique_name: str, client: aioredis.Redis
) -> None:
    """redis-py's pool holds 100 connections by default and refuses the 101st ("Too many connections"),
    which the broker took for Redis being unreachable: a consumer acking 300 deliveries at once (a test's
    drain under a loaded machine did) got an outage. The pool is as large as the calls at once."""
    async with RedisBroker.from_url(f"{redis_url}?prefix={unique_name}") as broker:
        await asyncio.gather(*(broker.publish(b"x", key=f"k{i}") for i in range(300)))
        got = []
        async for delivery in broker.consume(prefetch=300):
            got.append(delivery)
            if len(got) == 300:
                break
        await asyncio.gather(*(broker.ack(d) for d in got))
        assert await broker.pending() == 0
    assert sorted(d.key for d in got) == sorted(f"k{i}" for i in range(300))
    assert await client.xlen(f"{unique_name}:jobs") == 0  # acked: gone


async def test_client_decoding_responses_is_refused(redis_url: str) -> None:
    decoding = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        with pytest.raises(ConfigurationError, match="decode_responses=False"):
            RedisBroker.from_url(redis_url, client=decoding)
    finally:
        await decoding.aclose()


async def test_touch_extends_the_claim_only_while_it_is_ours(redis_url: str, unique_name: str,
                                                             client: aioredis.Redis) -> None:
    """``touch`` (one Lua script: XPENDING's owner check and XCLAIM together) resets the entry's idle
    time without counting a delivery; once another consumer claimed the entry it raises and leaves the
    entry with its new owner."""
    from crawlherd.errors import BrokerError

    stream = f"{unique_name}.jobs"
    url = f"{redis_url}?stream={stream}&claim_idle=1.0&block=0.05"  # margins for a loaded machine
    async with RedisBroker.from_url(url) as first, RedisBroker.from_url(url) as second:
        await first.publish(b"long job", key="long")
        async with asyncio.timeout(GUARD):
            d = await anext(first.consume())
        await asyncio.sleep(1.2)  # idle past claim_idle
        await first.touch(d)
        (entry,) = await client.xpending_range(stream, "crawlherd", "-", "+", 1)
        assert entry["consumer"].decode() == first.consumer
        assert entry["time_since_delivered"] < 1000  # reset by the touch
        assert entry["times_delivered"] == 1  # JUSTID: the touch is not a delivery
        await asyncio.sleep(1.2)  # idle again, now untouched: the second consumer claims it
        async with asyncio.timeout(GUARD):
            again = await anext(second.consume())
        assert again.key == "long" and again.redelivered
        with pytest.raises(BrokerError, match="claim was lost"):
            await first.touch(d)
        (entry,) = await client.xpending_range(stream, "crawlherd", "-", "+", 1)
        assert entry["consumer"].decode() == second.consumer  # not taken back
        await second.ack(again)
