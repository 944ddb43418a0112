"""Brokers going away and coming back: publish fails promptly and says so, nothing is reported as
published that the broker does not hold, and publishing works again once the broker is back.

- Redis: a PRIVATE ``redis-server`` on a free port (AOF with ``appendfsync always`` in the test's own
  directory), killed with SIGKILL by its PID and started again on the same port and directory.
- RabbitMQ: the shared server stays up; the broker talks to it through a loopback TCP proxy of the
  test's own, which the test takes down (every connection reset, new ones refused) and brings back.
- SQLite: another connection holds the database's write lock for longer than ``busy_timeout``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from crawlherd.brokers import Broker, Delivery, open_broker
from crawlherd.errors import BackendUnavailableError, PublishError
from tests.support.private_redis import PrivateRedis, private_redis_server
from tests.support.real_brokers import delete_queues

from .._netutil import TcpProxy

GUARD = 20.0


async def drain(broker: Broker, expected: int) -> list[Delivery]:
    """Consume and ack ``expected`` deliveries, then check nothing else is waiting."""
    got: list[Delivery] = []
    async with asyncio.timeout(GUARD):
        async for d in broker.consume(prefetch=50):
            got.append(d)
            await broker.ack(d)
            if len(got) == expected:
                break
    assert await broker.pending() == 0
    return got


async def publish_until_failure(broker: Broker, prefix: str, confirmed: list[str], *, signal_at: int = 0,
                                signal: asyncio.Event | None = None) -> None:
    """Publish until the broker refuses; record what was confirmed; set ``signal`` after ``signal_at``."""
    async with asyncio.timeout(GUARD):
        for i in range(1000):
            key = f"{prefix}-{i}"
            try:
                await broker.publish(key.encode(), key=key)
            except (BackendUnavailableError, PublishError):
                return
            confirmed.append(key)
            if signal is not None and len(confirmed) == signal_at:
                signal.set()
    raise AssertionError("publish never failed although the broker is down")


# -- Redis: a private server ---------------------------------------------------------------------------


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    yield from private_redis_server(tmp_path)


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_goes_away_and_comes_back(private_redis: PrivateRedis) -> None:
    url = f"redis://127.0.0.1:{private_redis.port}/0?prefix=outage"
    broker = await open_broker(url, connect_timeout=1.0, socket_timeout=2.0, block=0.1).__aenter__()
    try:
        confirmed = []
        for i in range(5):
            await broker.publish(f"before-{i}".encode(), key=f"before-{i}")
            confirmed.append(f"before-{i}")
        private_redis.kill()
        with pytest.raises(BackendUnavailableError):
            await broker.publish(b"during", key="during")
        with pytest.raises(BackendUnavailableError):
            await anext(broker.consume())
        with pytest.raises(BackendUnavailableError):
            await broker.pending()

        private_redis.start()
        for i in range(5):
            await broker.publish(f"after-{i}".encode(), key=f"after-{i}")
            confirmed.append(f"after-{i}")
        got = await drain(broker, len(confirmed))
        # every confirmed message is there (AOF), in order; the refused one is not
        assert [d.key for d in got] == confirmed
    finally:
        await broker.close()


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_killed_while_publishing(private_redis: PrivateRedis) -> None:
    url = f"redis://127.0.0.1:{private_redis.port}/0?prefix=outage2"
    publisher = await open_broker(url, connect_timeout=1.0, socket_timeout=2.0).__aenter__()
    try:
        confirmed: list[str] = []

        twenty = asyncio.Event()

        async def killer() -> None:
            await twenty.wait()
            private_redis.kill()

        kill_task = asyncio.create_task(killer(), name="kill-redis")
        await publish_until_failure(publisher, "m", confirmed, signal_at=20, signal=twenty)
        await kill_task
        assert len(confirmed) >= 20
        private_redis.start()
        got = await drain(publisher, len(confirmed))
        assert [d.key for d in got] == confirmed  # nothing confirmed was lost, nothing unconfirmed shows up
    finally:
        await publisher.close()


# -- RabbitMQ: a TCP proxy of the test's own -----------------------------------------------------------


@pytest.fixture
async def amqp_proxy(amqp_url: str) -> AsyncIterator[TcpProxy]:
    async with TcpProxy("127.0.0.1", 5672) as proxy:
        yield proxy


@pytest.mark.rabbitmq
@pytest.mark.slow
async def test_rabbitmq_goes_away_and_comes_back(amqp_url: str, amqp_proxy: TcpProxy, unique_name: str) -> None:
    proxied = amqp_url.replace("127.0.0.1:5672", f"127.0.0.1:{amqp_proxy.port}") + f"?queue={unique_name}"
    direct = await open_broker(f"{amqp_url}?queue={unique_name}").__aenter__()
    broker = await open_broker(proxied, connect_timeout=2.0, publish_timeout=5.0).__aenter__()
    try:
        confirmed = []
        for i in range(5):
            await broker.publish(f"before-{i}".encode(), key=f"before-{i}")
            confirmed.append(f"before-{i}")
        await amqp_proxy.down()
        with pytest.raises((BackendUnavailableError, PublishError)):
            await broker.publish(b"during", key="during")
        # the next attempt reconnects and is refused too: still down
        with pytest.raises(BackendUnavailableError):
            await broker.publish(b"during-2", key="during-2")

        await amqp_proxy.up()
        for i in range(5):
            await broker.publish(f"after-{i}".encode(), key=f"after-{i}")
            confirmed.append(f"after-{i}")
        got = await drain(direct, len(confirmed))
        assert [d.key for d in got] == confirmed
    finally:
        await broker.close()
        await delete_queues(direct, extra=broker.declared_queues)  # type: ignore[attr-defined]
        await direct.close()


@pytest.mark.rabbitmq
@pytest.mark.slow
async def test_rabbitmq_connection_lost_while_consuming(amqp_url: str, amqp_proxy: TcpProxy,
                                                       unique_name: str) -> None:
    proxied = amqp_url.replace("127.0.0.1:5672", f"127.0.0.1:{amqp_proxy.port}") + f"?queue={unique_name}"
    direct = await open_broker(f"{amqp_url}?queue={unique_name}").__aenter__()
    consumer = await open_broker(proxied, connect_timeout=2.0).__aenter__()
    try:
        await direct.publish(b"job", key="k")
        it = consumer.consume()
        d = await anext(it)
        await amqp_proxy.down()
        with pytest.raises(BackendUnavailableError):
            async with asyncio.timeout(GUARD):
                await anext(it)
        await amqp_proxy.up()
        # a new consume() reconnects; the unsettled delivery came back
        again = await anext(consumer.consume())
        assert (again.key, again.redelivered) == ("k", True)
        await consumer.ack(again)
        assert d.delivery_id != again.delivery_id
    finally:
        await consumer.close()
        await delete_queues(direct)
        await direct.close()


# -- SQLite: the write lock held elsewhere ----------------------------------------------------------------


async def test_sqlite_locked_publish_refused_then_works(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    broker = await open_broker(f"sqlite:///{path}", busy_timeout=0.2).__aenter__()
    try:
        await broker.publish(b"one", key="1")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(PublishError):
            await broker.publish(b"two", key="2")
        blocker.execute("ROLLBACK")
        blocker.close()
        await broker.publish(b"three", key="3")
        got = await drain(broker, 2)
        assert [d.key for d in got] == ["1", "3"]
    finally:
        await broker.close()
