"""What the SQS broker does beyond the broker contract, on the local SQS server (moto): FIFO
deduplication by idempotency key, the redrive policy, delays past SQS's 15-minute cap (the cap is
lowered for the test), visibility extended while a job runs, and messages other tools put on the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from crawlherd.brokers import open_broker
from crawlherd.brokers.base import Broker, Delivery
from crawlherd.brokers.sqs import SQSBroker
from tests.support.sqs_server import delete_queues, sqs_url

pytestmark = pytest.mark.sqs

GUARD = 15.0
FAST = {"wait_time": 1, "connect_timeout": 2.0}


@pytest.fixture
async def open_sqs(sqs_endpoint: str, unique_name: str) -> AsyncIterator[Any]:
    opened: list[Broker] = []
    names: set[str] = set()

    async def make(fifo: bool = False, **options: Any) -> SQSBroker:
        queue = unique_name + (".fifo" if fifo else "")
        names.update({queue, f"{unique_name}-dead" + (".fifo" if fifo else "")})
        broker = await open_broker(sqs_url(sqs_endpoint, queue), **{**FAST, **options}).__aenter__()
        opened.append(broker)
        assert isinstance(broker, SQSBroker)
        return broker

    yield make
    for broker in opened:
        await broker.close()
    await delete_queues(sqs_endpoint, *names)


async def take(it: AsyncIterator[Delivery]) -> Delivery:
    async with asyncio.timeout(GUARD):
        return await anext(it)


async def test_fifo_queue_drops_a_republish_under_the_same_key(open_sqs: Any) -> None:
    broker = await open_sqs(fifo=True)
    await broker.publish(b'{"job": 1}', key="7:2026-11-21T15:00:00+00:00")
    await broker.publish(b'{"job": 1}', key="7:2026-11-21T15:00:00+00:00")  # the relay, after a crash
    await broker.publish(b'{"job": 2}', key="8:2026-11-21T15:00:00+00:00")
    assert await broker.pending() == 2
    it = broker.consume()
    got = [await take(it), await take(it)]
    assert sorted(d.key for d in got) == ["7:2026-11-21T15:00:00+00:00", "8:2026-11-21T15:00:00+00:00"]
    for d in got:
        await broker.ack(d)


async def test_standard_queue_keeps_both_copies(open_sqs: Any) -> None:
    broker = await open_sqs()
    await broker.publish(b"x", key="k")
    await broker.publish(b"x", key="k")
    assert await broker.pending() == 2  # standard queues do not deduplicate: the workers do


async def test_redrive_policy_moves_a_message_received_too_often(open_sqs: Any) -> None:
    broker = await open_sqs(max_deliveries=2)
    await broker.publish(b"poison", key="k-poison", headers={"h": "v"})
    it = broker.consume()
    for _ in range(2):
        d = await take(it)
        await broker.nack(d, requeue=True)
    await broker.publish(b"next", key="k-next")
    d = await take(it)  # the receive that finds "poison" over the limit moves it to the dead-letter queue
    assert d.key == "k-next"
    await broker.ack(d)
    dead = await broker.dead_letters()
    assert [(x.body, x.key, dict(x.headers)) for x in dead] == [(b"poison", "k-poison", {"h": "v"})]
    assert "maxReceiveCount" in dead[0].reason


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
async def test_delay_past_the_cap_is_delivered_when_due_not_before(
    open_sqs: Any, monkeypatch: pytest.MonkeyPatch, fifo: bool
) -> None:
    monkeypatch.setattr("crawlherd.brokers.sqs.MAX_DELAY", 1)  # SQS's cap is 900 s; the mechanism is the same
    broker = await open_sqs(fifo=fifo)
    due = time.time() + 1.5
    await broker.publish(b"later", key="l", headers={"a": "b"}, delay=1.5)
    d = await take(broker.consume())
    assert time.time() >= due
    assert (d.body, d.key, dict(d.headers)) == (b"later", "l", {"a": "b"})
    await broker.ack(d)
    assert await broker.pending() == 0


async def test_visibility_is_extended_while_a_delivery_is_held(open_sqs: Any) -> None:
    holder = await open_sqs(visibility_timeout=2, heartbeat=0.5)
    other = await open_sqs(visibility_timeout=2)
    await holder.publish(b"long job", key="k")
    d = await take(holder.consume())
    with pytest.raises(TimeoutError):  # past two visibility timeouts, nobody else has received it
        async with asyncio.timeout(4.5):
            await anext(other.consume())
    await holder.ack(d)
    assert await holder.pending() == 0


async def test_messages_put_on_the_queue_by_other_tools_are_delivered(open_sqs: Any) -> None:
    broker = await open_sqs()
    answer = await broker.client.send_message(QueueUrl=broker._url, MessageBody='{"from": "elsewhere"}')
    d = await take(broker.consume())
    assert (d.body, d.key, dict(d.headers)) == (b'{"from": "elsewhere"}', answer["MessageId"], {})
    await broker.ack(d)


async def test_brokers_share_one_botocore_session(open_sqs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker opened after another does not make a botocore session of its own (each reads botocore's
    endpoint and service data again), and both still work."""
    from crawlherd.brokers import _sqs_wire

    made: list[object] = []
    real = _sqs_wire.get_session
    monkeypatch.setattr(_sqs_wire, "get_session", lambda: made.append(1) or real())
    _sqs_wire.aws_session.cache_clear()
    try:
        first = await open_sqs()
        second = await open_sqs()
        await first.publish(b"one", key="k1")
        delivery = await take(second.consume())
        assert delivery.body == b"one"
        await second.ack(delivery)
    finally:
        _sqs_wire.aws_session.cache_clear()
    assert len(made) == 1
