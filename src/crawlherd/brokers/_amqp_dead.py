"""The RabbitMQ broker's dead-letter queue: listing it and sending its messages back.

RabbitMQ has no way to look at a queue without taking its messages: :class:`DeadLetterQueue` takes them
with ``basic.get`` on a throw-away channel and closes it, so the messages it did not ack go back where
they were (see :mod:`crawlherd.brokers.amqp`).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

import aio_pika
import aio_pika.exceptions as pika_exc
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue

from crawlherd.brokers._amqp_wire import DEAD_AT, DEAD_ID, KEY_HEADER, REASON, AMQPBrokerOptions, header, str_headers
from crawlherd.brokers._common import log
from crawlherd.brokers.base import DeadLetter
from crawlherd.errors import MessageRejectedError

__all__ = ["DeadLetterQueue", "dead_letter_of"]

T = TypeVar("T")


class _Broker(Protocol):
    """What :class:`DeadLetterQueue` uses of its :class:`~crawlherd.brokers.amqp.AMQPBroker`."""

    options: AMQPBrokerOptions
    queue: str
    dead_queue: str
    _connection: AbstractConnection | None

    async def _channel(self) -> AbstractChannel: ...

    def _live(self, resource: T | None) -> T: ...

    def _driver_errors(self, doing: str) -> AbstractContextManager[None]: ...


def dead_letter_of(m: AbstractIncomingMessage) -> DeadLetter:
    """The dead letter a message of the dead-letter queue is: dead-lettered by this broker (its headers
    say why, when and under which id) or by RabbitMQ itself (``x-death``; its id then a digest)."""
    headers = m.headers or {}
    reason = header(headers, REASON)
    dead_at_s = header(headers, DEAD_AT)
    dead_at = float(dead_at_s) if dead_at_s else None
    dead_id = header(headers, DEAD_ID)
    if reason is None:  # dead-lettered by RabbitMQ itself
        deaths = headers.get("x-death")
        first = deaths[0] if isinstance(deaths, list) and deaths else {}
        reason = f"rabbitmq: {header(first, 'reason') or 'unknown'}" if isinstance(first, Mapping) else "rabbitmq"
    if dead_id is None:
        digest = hashlib.sha256(m.body + repr(sorted(str_headers(headers).items())).encode())
        dead_id = f"x{digest.hexdigest()[:24]}"
    key = m.message_id or header(headers, KEY_HEADER) or ""
    return DeadLetter(m.body, key, reason, dead_id, dead_at, str_headers(headers))


class DeadLetterQueue:
    """``dead_letters`` and ``requeue_dead`` of one :class:`~crawlherd.brokers.amqp.AMQPBroker`."""

    def __init__(self, broker: _Broker) -> None:
        self.broker = broker

    async def _scratch_channel(self, confirms: bool) -> tuple[AbstractChannel, AbstractQueue, int]:
        broker = self.broker
        await broker._channel()
        connection = broker._live(broker._connection)
        with broker._driver_errors(f"dead-letter queue {broker.dead_queue!r}"):
            ch = await connection.channel(publisher_confirms=confirms, on_return_raises=confirms)
            queue = await ch.declare_queue(broker.dead_queue, passive=True)
        count = queue.declaration_result.message_count or 0
        return ch, queue, int(count)

    async def list(self, limit: int) -> list[DeadLetter]:
        ch, queue, count = await self._scratch_channel(confirms=False)
        out: list[DeadLetter] = []
        try:
            with self.broker._driver_errors("reading the dead-letter queue"):
                while len(out) < limit:
                    m = await queue.get(no_ack=False, fail=False, timeout=self.broker.options.publish_timeout)
                    if m is None:
                        break
                    out.append(dead_letter_of(m))
        finally:
            await _close_quietly(ch, self.broker)  # every message got goes back, in place
        if out:
            await self._wait_count(count)
        return out

    async def requeue(self, dead_id: str | None) -> int:
        broker = self.broker
        ch, queue, count = await self._scratch_channel(confirms=True)
        moved = 0
        try:
            with broker._driver_errors("requeueing dead letters"):
                for _ in range(max(count, 1) * 2 + 100):  # a bound, in case dead letters keep arriving
                    m = await queue.get(no_ack=False, fail=False, timeout=broker.options.publish_timeout)
                    if m is None:
                        break
                    dead = dead_letter_of(m)
                    if dead_id is not None and dead.dead_id != dead_id:
                        continue  # left unacked: back in place when the channel closes
                    msg = aio_pika.Message(m.body, headers=dict(dead.headers), message_id=dead.key,
                                           delivery_mode=aio_pika.DeliveryMode.PERSISTENT, timestamp=time.time())
                    try:
                        await ch.default_exchange.publish(msg, broker.queue, mandatory=True,
                                                          timeout=broker.options.publish_timeout)
                    except pika_exc.PublishError as exc:
                        raise MessageRejectedError(f"{broker!r}: requeue returned as unroutable: {exc}") from exc
                    await m.ack()
                    moved += 1
                    if dead_id is not None:
                        break
        finally:
            await _close_quietly(ch, broker)
        await self._wait_count(count - moved)
        return moved

    async def _wait_count(self, expected: int) -> None:
        """Wait (briefly) until the messages a closed scratch channel held are back in the dead-letter
        queue: RabbitMQ returns them asynchronously (quorum queues through Raft), and a caller that lists
        or requeues again right away must find them."""
        broker = self.broker
        ch = await broker._channel()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            with broker._driver_errors(f"dead-letter queue {broker.dead_queue!r}"):
                queue = await ch.declare_queue(broker.dead_queue, passive=True)
            if (queue.declaration_result.message_count or 0) >= expected:
                return
            await asyncio.sleep(0.01)


async def _close_quietly(ch: AbstractChannel, where: object) -> None:
    try:
        async with asyncio.timeout(5):
            await ch.close()
    except Exception as exc:  # noqa: BLE001
        log.debug("%r: closing a scratch channel: %r", where, exc)
