"""Helpers for tests against the real brokers (``crawlherd.brokers.{sqlite,redis,amqp}``): scratch queue
names, draining a broker to count what was published, removing what a test created on the shared
services (:func:`delete_queues`, :func:`remove`), and a kill-after-publish wrapper."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from crawlherd.brokers import open_broker
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.errors import BrokerError


def scratch_url(kind: str, name: str, *, sqlite_path: str, redis_url: str, amqp_url: str,
                sqs_endpoint: str = "") -> str:
    if kind == "sqs":
        from tests.support.sqs_server import sqs_url

        return sqs_url(sqs_endpoint, name)
    if kind == "sqlite":
        return f"sqlite:///{sqlite_path}?queue={name}"
    if kind == "redis":
        return f"{redis_url}?prefix={name}"
    return f"{amqp_url}?queue={name}"


async def drain(
    url: str, *, idle: float = 3.0, expect: int = 0, expect_keys: int = 0, patience: float = 60.0,
    acks_in_flight: int = 64,
) -> list[Delivery]:
    """Consume and ack everything in the broker until nothing arrives for ``idle`` seconds -- or, while
    fewer than ``expect`` messages, or fewer than ``expect_keys`` distinct keys, have come, for
    ``patience`` seconds (a busy machine's broker, moto's SQS above all, can take longer than ``idle`` to
    answer a receive, and a message redelivered meanwhile is not one more of those expected; what comes
    after is still waited for ``idle``, so a duplicate is seen).

    Up to ``acks_in_flight`` acks run at once, as a worker's slots settle theirs: one at a time, 25,000
    deliveries took a busy machine a minute (an SQS ack waits for its delete batch to fill or time out).
    An SQS message received again (its delete was on its way past its visibility timeout) is acked and
    not counted again: what is counted is what was published -- messages, not deliveries."""
    got: list[Delivery] = []
    keys: set[str] = set()
    messages: set[str | None] = set()
    acks: list[asyncio.Task[None]] = []
    if url.startswith("sqs"):
        acks_in_flight = min(acks_in_flight, 10)  # one delete batch: moto answers one request at a time
    async with open_broker(url) as broker:
        stream = broker.consume(prefetch=200).__aiter__()
        try:
            while True:
                waiting = len(got) < expect or len(keys) < expect_keys
                try:
                    delivery = await asyncio.wait_for(stream.__anext__(), patience if waiting else idle)
                except (TimeoutError, StopAsyncIteration):
                    break
                acks.append(asyncio.create_task(broker.ack(delivery)))
                message = _message_id(delivery)
                if message is None or message not in messages:  # else the same message again (SQS: its
                    messages.add(message)                       # delete was slower than its visibility)
                    got.append(delivery)
                    keys.add(delivery.key)
                pending = [t for t in acks[-acks_in_flight - 1:] if not t.done()]
                if len(pending) > acks_in_flight:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # every ack done before the broker closes; one refused (BrokerError: its lease lost, the
            # message received again meanwhile) leaves the message to its later delivery
            for result in await asyncio.gather(*acks, return_exceptions=True):
                if isinstance(result, BaseException) and not isinstance(result, BrokerError):
                    raise result
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
    return got


def _message_id(delivery: Delivery) -> str | None:
    """SQS's MessageId of ``delivery`` (one per publish, the same on every receive); None elsewhere."""
    raw = delivery.raw
    return raw.get("MessageId") if isinstance(raw, dict) and isinstance(raw.get("MessageId"), str) else None


def keys_of(deliveries: list[Delivery]) -> Counter[str]:
    return Counter(d.key for d in deliveries)


async def delete_queues(broker: Broker, *, extra: Iterable[str] = ()) -> None:
    """RabbitMQ: delete ``broker``'s queues (main, dead, the delay queues it declared, ``extra``) and its
    dead-letter exchange, with every message in them. Other brokers: nothing (their tests use scratch
    files and key prefixes)."""
    from crawlherd.brokers.amqp import AMQPBroker

    if not isinstance(broker, AMQPBroker):
        return
    ch = await broker._channel()
    for name in sorted({broker.queue, broker.dead_queue, *broker.declared_queues, *extra}):
        await ch.queue_delete(name)
    await ch.exchange_delete(broker.dead_exchange)


async def remove(url: str, kind: str, name: str) -> None:
    """Delete the test's queues (RabbitMQ, SQS) or keys (Redis); SQLite files live in tmp_path."""
    if kind == "sqs":
        from tests.support.sqs_server import delete_queues as delete_sqs_queues

        endpoint = open_broker(url).options.endpoint_url  # type: ignore[attr-defined]
        await delete_sqs_queues(endpoint, name, f"{name}-dead")
    elif kind == "amqp":
        async with open_broker(url) as broker:
            await delete_queues(broker)
    elif kind == "redis":
        import redis.asyncio as aioredis

        client = aioredis.from_url(url.split("?", 1)[0])
        try:
            keys = [k async for k in client.scan_iter(match=f"{name}*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


class DieAfterPublish:
    """``die+<url>``: the real broker for ``<url>``, but the process SIGKILLs itself right after the
    first publish is confirmed -- a dispatcher killed between publish and mark."""

    def __init__(self, inner: Broker) -> None:
        self.inner = inner

    @classmethod
    def from_url(cls, url: str, **options: Any) -> DieAfterPublish:
        return cls(open_broker(url.split("+", 1)[1], **options))

    async def __aenter__(self) -> DieAfterPublish:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.inner.__aexit__(*exc_info)

    async def publish(
        self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> None:
        await self.inner.publish(body, key=key, headers=headers, delay=delay)
        os.kill(os.getpid(), signal.SIGKILL)

    def consume(self, *, prefetch: int = 10) -> AsyncIterator[Delivery]:
        return self.inner.consume(prefetch=prefetch)

    async def ack(self, delivery: Delivery) -> None:
        await self.inner.ack(delivery)

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        await self.inner.nack(delivery, requeue=requeue)

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        await self.inner.retry(delivery, delay=delay, body=body)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        await self.inner.dead_letter(delivery, reason)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return await self.inner.dead_letters(limit)

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        return await self.inner.requeue_dead(dead_id)

    async def pending(self) -> int:
        return await self.inner.pending()

    async def close(self) -> None:
        await self.inner.close()
