"""A table-backed Broker test double for the multi-process dispatcher tests (replaced by the real
brokers at integration): every confirmed publish is one committed row in ``test_publishes`` of the
database named by the URL, duplicates included, so a test can count publishes across processes.

URL: ``testdb+postgresql://user@host/db`` or ``testdb+sqlite:///path``. With the environment variable
``CRAWLHERD_TEST_DIE_AFTER_PUBLISH=1`` the process kills itself with SIGKILL right after the first
publish is committed (before the dispatcher can mark it): the crash test.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Mapping

from sqlalchemy import text

from crawlherd.brokers.base import DeadLetter, Delivery
from crawlherd.db.engine import create_engine

DDL = "CREATE TABLE IF NOT EXISTS test_publishes (id {pk}, key TEXT NOT NULL, body TEXT NOT NULL, pid INTEGER NOT NULL)"


class TableBrokerDouble:
    """Publish-only double: ``consume`` is not needed by the dispatcher tests."""

    def __init__(self, url: str) -> None:
        self.url = url.split("+", 1)[1]
        self.engine = create_engine(self.url)
        self.die_after_publish = os.environ.get("CRAWLHERD_TEST_DIE_AFTER_PUBLISH") == "1"

    @classmethod
    def from_url(cls, url: str) -> TableBrokerDouble:
        return cls(url)

    async def __aenter__(self) -> TableBrokerDouble:
        pk = "INTEGER PRIMARY KEY" if self.engine.dialect.name == "sqlite" else "BIGSERIAL PRIMARY KEY"
        async with self.engine.begin() as conn:
            await conn.execute(text(DDL.format(pk=pk)))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def publish(
        self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                text("INSERT INTO test_publishes (key, body, pid) VALUES (:k, :b, :p)"),
                {"k": key, "b": body.decode(), "p": os.getpid()},
            )
        if self.die_after_publish:
            os.kill(os.getpid(), signal.SIGKILL)

    def consume(self, *, prefetch: int = 10) -> AsyncIterator[Delivery]:
        raise NotImplementedError("TableBrokerDouble only records publishes")

    async def ack(self, delivery: Delivery) -> None:
        raise NotImplementedError

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        raise NotImplementedError

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        raise NotImplementedError

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        raise NotImplementedError

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return []

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        return 0

    async def pending(self) -> int:
        return 0

    async def close(self) -> None:
        await self.engine.dispose()
