"""An in-memory Broker test double for the dispatcher's tests (replaced by the real brokers at
integration). It records every publish, and can be switched ``down`` to make publishes fail."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Mapping

from crawlherd.brokers.base import DeadLetter, Delivery
from crawlherd.errors import BackendUnavailableError, BrokerError


class MemoryBrokerDouble:
    """Implements :class:`crawlherd.brokers.base.Broker` in process; ``published`` lists every confirmed
    publish as ``(key, body)``, duplicates included."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes]] = []
        self.down = False
        self.fail_after: int | None = None  # go down after this many more successful publishes
        self.failed_publishes = 0
        self._queue: deque[Delivery] = deque()
        self._unsettled: dict[str, Delivery] = {}
        self._dead: dict[str, DeadLetter] = {}
        self._ids = itertools.count(1)
        self._ready = asyncio.Event()
        self.closed = False

    @classmethod
    def from_url(cls, url: str) -> MemoryBrokerDouble:
        return cls()

    async def __aenter__(self) -> MemoryBrokerDouble:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def publish(
        self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> None:
        if self.closed:
            raise BrokerError("broker is closed")
        await asyncio.sleep(0)  # a real publish yields to the loop while waiting for the confirm
        if self.fail_after is not None:
            if self.fail_after <= 0:
                self.down, self.fail_after = True, None
            else:
                self.fail_after -= 1
        if self.down:
            self.failed_publishes += 1
            raise BackendUnavailableError("test double broker is down", backend="memory-double")
        self.published.append((key, body))
        self._queue.append(Delivery(body, key, str(next(self._ids)), headers=dict(headers or {})))
        self._ready.set()

    async def consume(self, *, prefetch: int = 10) -> AsyncIterator[Delivery]:
        while not self.closed:
            while self._queue and len(self._unsettled) < prefetch:
                delivery = self._queue.popleft()
                self._unsettled[delivery.delivery_id] = delivery
                yield delivery
            self._ready.clear()
            await self._ready.wait()

    async def ack(self, delivery: Delivery) -> None:
        self._unsettled.pop(delivery.delivery_id, None)
        self._ready.set()

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        self._unsettled.pop(delivery.delivery_id, None)
        if requeue:
            self._queue.appendleft(Delivery(delivery.body, delivery.key, delivery.delivery_id, redelivered=True))
        else:
            await self.dead_letter(delivery, "nacked")
        self._ready.set()

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        await self.publish(body if body is not None else delivery.body, key=delivery.key, delay=delay)
        await self.ack(delivery)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        self._unsettled.pop(delivery.delivery_id, None)
        dead_id = str(next(self._ids))
        self._dead[dead_id] = DeadLetter(delivery.body, delivery.key, reason, dead_id)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return list(self._dead.values())[:limit]

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        ids = [dead_id] if dead_id is not None else list(self._dead)
        count = 0
        for i in ids:
            dead = self._dead.pop(i, None)
            if dead is not None:
                self._queue.append(Delivery(dead.body, dead.key, str(next(self._ids))))
                count += 1
        self._ready.set()
        return count

    async def pending(self) -> int:
        return len(self._queue)

    async def close(self) -> None:
        self.closed = True
        self._ready.set()
