"""RabbitMQ specifics beyond the contract: mandatory routing, quorum queues and their delivery limit,
declaration conflicts, a live connection that the broker must not close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import pytest

from crawlherd.brokers.amqp import AMQPBroker
from crawlherd.errors import BrokerError, ConfigurationError, MessageRejectedError
from tests._netutil import TcpProxy
from tests.support.real_brokers import delete_queues

pytestmark = pytest.mark.rabbitmq
GUARD = 15.0


@pytest.fixture
async def connection(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractConnection]:
    conn = await aio_pika.connect(amqp_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def cleanup(connection: aio_pika.abc.AbstractConnection, unique_name: str) -> AsyncIterator[list[str]]:
    """Queue names to delete after the test (prefix match on the test's unique name)."""
    names: list[str] = []
    yield names
    ch = await connection.channel()
    for name in {unique_name, f"{unique_name}.dead", *names}:
        await ch.queue_delete(name)
    await ch.exchange_delete(f"{unique_name}.dlx")
    await ch.close()


async def test_unroutable_publish_raises(amqp_url: str, unique_name: str, connection: aio_pika.abc.AbstractConnection,
                                         cleanup: list[str]) -> None:
    async with AMQPBroker.from_url(f"{amqp_url}?queue={unique_name}") as broker:
        await broker.publish(b"ok", key="k1")
        ch = await connection.channel()
        await ch.queue_delete(unique_name)  # someone removed the queue
        await ch.close()
        with pytest.raises(MessageRejectedError, match="unroutable"):  # the relay dead-letters these
            await broker.publish(b"lost?", key="k2")


async def test_consumer_cancelled_by_rabbitmq_raises(amqp_url: str, unique_name: str,
                                                     connection: aio_pika.abc.AbstractConnection,
                                                     cleanup: list[str]) -> None:
    async with AMQPBroker.from_url(f"{amqp_url}?queue={unique_name}") as broker:
        await broker.publish(b"x", key="k")
        it = broker.consume()
        d = await anext(it)
        ch = await connection.channel()
        await ch.queue_delete(unique_name)
        await ch.close()
        with pytest.raises(BrokerError, match="cancelled the consumer"):
            async with asyncio.timeout(GUARD):
                await anext(it)
        await broker.ack(d)  # settling what it holds still works (RabbitMQ accepts the ack)


async def test_quorum_queue_delivery_limit_dead_letters_natively(amqp_url: str, unique_name: str,
                                                                 cleanup: list[str]) -> None:
    url = f"{amqp_url}?queue={unique_name}&queue_type=quorum&delivery_limit=1"
    async with AMQPBroker.from_url(url) as broker:
        await broker.publish(b"poison", key="p", headers={"a": "b"})
        it = broker.consume()
        for _ in range(2):
            d = await anext(it)
            await broker.nack(d, requeue=True)
        # RabbitMQ dead-letters it itself once the limit is passed; wait for it (a guard, not a timing claim)
        async with asyncio.timeout(GUARD):
            while not (dead := await broker.dead_letters()):  # noqa: ASYNC110 - server state: no event to await
                await asyncio.sleep(0.05)
        assert [(x.key, x.body, dict(x.headers)) for x in dead] == [("p", b"poison", {"a": "b"})]
        assert dead[0].reason == "rabbitmq: delivery_limit"
        assert await broker.requeue_dead(dead[0].dead_id) == 1
        again = await anext(it)  # (RabbitMQ pushes: the open consume() iterator gets it)
        assert (again.key, again.body) == ("p", b"poison")
        await broker.ack(again)
        assert await broker.dead_letters() == []


async def test_existing_queue_with_other_arguments_is_a_clear_error(amqp_url: str, unique_name: str,
                                                                    cleanup: list[str]) -> None:
    async with AMQPBroker.from_url(f"{amqp_url}?queue={unique_name}"):
        pass
    broker = AMQPBroker.from_url(f"{amqp_url}?queue={unique_name}&queue_type=quorum")
    with pytest.raises(ConfigurationError, match="already exists with other arguments"):
        await broker.__aenter__()
    await broker.close()


async def test_live_connection_is_used_and_not_closed(amqp_url: str, unique_name: str,
                                                      connection: aio_pika.abc.AbstractConnection,
                                                      cleanup: list[str]) -> None:
    async with AMQPBroker.from_url(f"{amqp_url}?queue={unique_name}", connection=connection) as broker:
        await broker.publish(b"x", key="k")
        d = await anext(broker.consume())
        await broker.ack(d)
    assert not connection.is_closed
    ch = await connection.channel()  # still usable
    await ch.close()


async def test_delay_queues_dead_letter_back_into_the_main_queue(amqp_url: str, unique_name: str,
                                                                 cleanup: list[str]) -> None:
    async with AMQPBroker.from_url(f"{amqp_url}?queue={unique_name}") as broker:
        await broker.publish(b"later", key="k", delay=0.05, headers={"h": "1"})
        cleanup.extend(broker.declared_queues)
        assert f"{unique_name}.delay.50" in broker.declared_queues
        d = await anext(broker.consume())
        # x-death and friends, added by RabbitMQ on the way, are not shown as the publisher's headers
        assert (d.key, d.body, dict(d.headers), d.redelivered) == ("k", b"later", {"h": "1"}, False)
        assert "x-death" in (d.raw.headers or {})
        await broker.ack(d)


@pytest.mark.timeout(120)
async def test_confirms_slower_than_publish_timeout_are_waited_for_while_they_come(amqp_url: str,
                                                                                  unique_name: str) -> None:
    """Thousands of publishes in flight at once over a slow link: the last confirms come several times
    ``publish_timeout`` after their publish started, but confirms keep coming, so none of them is a
    failure (a failure would be published again by the relay: a duplicate of a message RabbitMQ kept).
    ``publish_timeout`` is how long RabbitMQ may confirm *nothing* before the publishes in flight fail."""
    # A test-owned proxy forwards the publishes at 30 kB/s in steps of 20 ms: 2,000 publishes of about
    # 150 bytes reach RabbitMQ over about 6 s -- confirms come all along, late for the last ones, on a
    # quiet machine or a busy one (it used to take 15,000 publishes racing the machine's speed). A
    # publish_timeout of 2 s, not 1: in the suite, other tests' load on RabbitMQ held its confirms for
    # over a second at times (413 of 2,000 failed once).
    n, publish_timeout = 2000, 2.0
    async with TcpProxy("127.0.0.1", 5672) as proxy:
        proxy.pace(30_000)
        proxied = amqp_url.replace("127.0.0.1:5672", f"127.0.0.1:{proxy.port}")
        url = f"{proxied}?queue={unique_name}&publish_timeout={publish_timeout:g}"
        async with AMQPBroker.from_url(url) as broker:
            try:
                started = asyncio.get_running_loop().time()
                results = await asyncio.gather(
                    *(broker.publish(f"m{i}".encode(), key=f"m{i}") for i in range(n)), return_exceptions=True)
                took = asyncio.get_running_loop().time() - started
                failures = [r for r in results if isinstance(r, BaseException)]
                assert not failures, f"{len(failures)} of {n} failed, first: {failures[0]!r}"
                assert took > 2 * publish_timeout, f"the link was not slow enough to show anything ({took:.1f}s)"
                assert await broker.pending() == n
            finally:
                proxy.pace(None)
                await delete_queues(broker)
