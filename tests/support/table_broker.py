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

import aiosqlite
import asyncpg

from crawlherd.brokers.base import DeadLetter, Delivery

DDL = "CREATE TABLE IF NOT EXISTS test_publishes (id {pk}, key TEXT NOT NULL, body TEXT NOT NULL, pid INTEGER NOT NULL)"


class TableBrokerDouble:
    """Publish-only double: ``consume`` is not needed by the dispatcher tests."""

    def __init__(self, url: str) -> None:
        self.url = url.split("+", 1)[1]
        self.sqlite_path = self.url[len("sqlite:///") :] if self.url.startswith("sqlite") else None
        self.pool: asyncpg.Pool | None = None
        self.db: aiosqlite.Connection | None = None
        self.die_after_publish = os.environ.get("CRAWLHERD_TEST_DIE_AFTER_PUBLISH") == "1"

    @classmethod
    def from_url(cls, url: str) -> TableBrokerDouble:
        return cls(url)

    async def __aenter__(self) -> TableBrokerDouble:
        # Raw drivers in autocommit: one round trip per publish, so the double is not the bottleneck.
        if self.sqlite_path is not None:
            self.db = await aiosqlite.connect(self.sqlite_path, isolation_level=None, timeout=30)
            await self.db.execute("PRAGMA busy_timeout=30000")
            await self.db.execute(DDL.format(pk="INTEGER PRIMARY KEY"))
        else:
            self.pool = await asyncpg.create_pool(self.url, min_size=1, max_size=8)
            await self.pool.execute(DDL.format(pk="BIGSERIAL PRIMARY KEY"))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def publish(
        self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> None:
        if self.db is not None:
            await self.db.execute(
                "INSERT INTO test_publishes (key, body, pid) VALUES (?, ?, ?)", (key, body.decode(), os.getpid())
            )
        else:
            assert self.pool is not None
            await self.pool.execute(
                "INSERT INTO test_publishes (key, body, pid) VALUES ($1, $2, $3)", key, body.decode(), os.getpid()
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
        if self.db is not None:
            await self.db.close()
            self.db = None
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
