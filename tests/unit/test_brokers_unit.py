"""Brokers without a service: options, URLs, reprs, the SQLite file layout, poison messages."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from crawlherd.brokers import open_broker
from crawlherd.brokers.amqp import AMQPBroker, delay_bucket_ms
from crawlherd.brokers.memory import MemoryBroker
from crawlherd.brokers.redis import RedisBroker
from crawlherd.brokers.sqlite import SQLiteBroker, sqlite_path
from crawlherd.clock import FakeClock
from crawlherd.errors import BackendUnavailableError, BrokerError, ConfigurationError

from .._netutil import free_port


def test_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"amqp://.*redis://.*sqlite://"):
        open_broker("kafka://localhost")


@pytest.mark.parametrize("url", ["memory://", "sqlite:///x.db", "redis://127.0.0.1/0", "amqp://127.0.0.1/"])
def test_unknown_option_lists_the_known_ones(url: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown .* option 'bogus'; known options: "):
        open_broker(url, bogus=1)
    with pytest.raises(ConfigurationError, match="'bogus'"):
        open_broker(f"{url}?bogus=1")


def test_query_values_are_converted_and_validated() -> None:
    broker = open_broker("sqlite:///x.db?queue=q1&visibility_timeout=12.5&max_deliveries=3")
    assert isinstance(broker, SQLiteBroker)
    assert (broker.queue, broker.options.visibility_timeout, broker.options.max_deliveries) == ("q1", 12.5, 3)
    with pytest.raises(ConfigurationError, match="visibility_timeout='soon' is not a float"):
        open_broker("sqlite:///x.db?visibility_timeout=soon")
    with pytest.raises(ConfigurationError, match="visibility_timeout=-1.0: must be > 0"):
        open_broker("sqlite:///x.db", visibility_timeout=-1.0)
    with pytest.raises(ConfigurationError, match="cannot be given in the URL"):
        open_broker("memory://?clock=x")
    with pytest.raises(ConfigurationError, match="queue_type='stream'"):
        open_broker("amqp://127.0.0.1/?queue_type=stream")
    with pytest.raises(ConfigurationError, match="delivery_limit"):
        open_broker("amqp://127.0.0.1/?delivery_limit=3")  # quorum only
    with pytest.raises(ConfigurationError, match="shorter than socket_timeout"):
        open_broker("redis://127.0.0.1/0?block=20&socket_timeout=10")


def test_redis_names_from_prefix_or_stream() -> None:
    broker = open_broker("redis://127.0.0.1:6379/0?prefix=crawl")
    assert isinstance(broker, RedisBroker)
    assert (broker.stream, broker.dead_stream) == ("crawl:jobs", "crawl:jobs:dead")
    broker = open_broker("redis://127.0.0.1:6379/0?stream=jobs.v1&group=workers")
    assert isinstance(broker, RedisBroker)
    assert (broker.stream, broker.group) == ("jobs.v1", "workers")


@pytest.mark.parametrize(("url", "secret"), [
    ("amqp://crawler:s3cr3t@rabbit.example:5672/prod?queue=jobs", "s3cr3t"),
    ("redis://:s3cr3t@redis.example:6379/0?prefix=p", "s3cr3t"),
    ("redis://user:s3cr3t@redis.example:6379/0", "s3cr3t"),
])
def test_secrets_never_in_repr(url: str, secret: str) -> None:
    broker = open_broker(url)
    assert secret not in repr(broker)
    assert "***" in repr(broker)


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
async def test_unreachable_service_error_is_prompt_and_keeps_secrets(scheme: str) -> None:
    url = f"{scheme}://user:s3cr3t@127.0.0.1:{free_port()}/"
    broker = open_broker(url, connect_timeout=2.0)
    with pytest.raises(BackendUnavailableError) as info:
        async with broker:
            await broker.publish(b"x", key="k")
    await broker.close()
    assert "s3cr3t" not in str(info.value)
    assert info.value.backend == scheme


def test_sqlite_paths() -> None:
    assert sqlite_path("sqlite:///crawlherd.db") == "crawlherd.db"
    assert sqlite_path("sqlite:////var/lib/crawlherd.db") == "/var/lib/crawlherd.db"
    assert sqlite_path("sqlite+aiosqlite:///data/c.db?queue=x") == "data/c.db"
    for bad in ("sqlite:///:memory:", "sqlite://", "sqlite://host/x.db"):
        with pytest.raises(ConfigurationError):
            sqlite_path(bad)


@pytest.mark.parametrize(("delay", "ms"), [(0.0001, 1), (0.05, 50), (0.2, 200), (1.234, 1300), (37.3, 38000),
                                           (3600, 3600000)])
def test_delay_buckets_round_up(delay: float, ms: int) -> None:
    assert delay_bucket_ms(delay) == ms
    assert ms >= delay * 1000


def test_amqp_topology_names() -> None:
    broker = AMQPBroker.from_url("amqp://127.0.0.1/?queue=crawl.jobs")
    assert (broker.queue, broker.dead_queue, broker.dead_exchange) == ("crawl.jobs", "crawl.jobs.dead",
                                                                       "crawl.jobs.dlx")


async def test_sqlite_broker_shares_the_config_db_file(tmp_path: Path) -> None:
    path = tmp_path / "crawlherd.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE websites (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO websites (name) VALUES ('example')")
    conn.commit()
    conn.close()
    async with open_broker(f"sqlite:///{path}?queue=a") as a, open_broker(f"sqlite:///{path}?queue=b") as b:
        await a.publish(b"for a", key="ka")
        await b.publish(b"for b", key="kb")
        assert (await a.pending(), await b.pending()) == (1, 1)
        d = await anext(b.consume())
        assert d.body == b"for b"
        await b.ack(d)
        assert (await a.pending(), await b.pending()) == (1, 0)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"websites", "broker_messages", "broker_dead_letters"} <= tables
        assert conn.execute("SELECT name FROM websites").fetchall() == [("example",)]
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_poison_message_is_dead_lettered_after_max_deliveries(kind: str, tmp_path: Path) -> None:
    clock = FakeClock()
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'b.db'}"
    opts = {"clock": clock, "visibility_timeout": 10.0, "max_deliveries": 2}
    if kind == "sqlite":
        opts["poll_interval"] = 0.01
    async with open_broker(url, **opts) as broker:
        await broker.publish(b"crashes the worker", key="poison")
        for _ in range(2):  # two consumers die holding it
            d = await anext(broker.consume())
            assert d.key == "poison"
            broker._outstanding.clear()  # type: ignore[attr-defined]  # forget it, as a dead process would
            clock.advance(11)
        consumer = broker.consume()
        waiting = asyncio.ensure_future(anext(consumer))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        waiting.cancel()
        dead = await broker.dead_letters()
        assert [(x.key, x.reason) for x in dead] == [("poison", "delivered 2 times without being settled")]


async def test_memory_named_queues_are_shared_private_ones_are_not() -> None:
    async with MemoryBroker.from_url("memory://shared-q") as a, MemoryBroker.from_url("memory://shared-q") as b, \
            MemoryBroker.from_url("memory://") as c:
        await a.publish(b"x", key="k")
        assert (await b.pending(), await c.pending()) == (1, 0)


async def test_memory_record_lists_every_confirmed_publish() -> None:
    async with MemoryBroker.from_url("memory://?record=true") as broker:
        await broker.publish(b"1", key="a")
        await broker.publish(b"1", key="a")  # a duplicate is recorded twice
        await broker.publish(b"2", key="b", delay=5.0)
        assert broker.published == [("a", b"1"), ("a", b"1"), ("b", b"2")]
    async with MemoryBroker.from_url("memory://") as quiet:
        with pytest.raises(BrokerError, match="record=True"):
            _ = quiet.published


async def test_memory_fault_switch_fails_every_operation_and_changes_nothing() -> None:
    clock = FakeClock()
    async with MemoryBroker.from_url("memory://", clock=clock, record=True) as broker:
        await broker.publish(b"x", key="k")
        stream = broker.consume(prefetch=1)
        delivery = await anext(stream)
        broker.set_down()
        with pytest.raises(BackendUnavailableError, match="is down"):
            await broker.publish(b"y", key="k2")
        for settle in (broker.ack(delivery), broker.nack(delivery), broker.retry(delivery, delay=1.0),
                       broker.dead_letter(delivery, "why"), broker.pending(), broker.dead_letters(),
                       broker.requeue_dead()):
            with pytest.raises(BackendUnavailableError):
                await settle
        await stream.aclose()
        with pytest.raises(BackendUnavailableError):
            await anext(broker.consume())
        broker.set_down(False)
        await broker.ack(delivery)  # still held: the failed settles changed nothing
        assert broker.published == [("k", b"x")]
        assert await broker.pending() == 0


async def test_memory_goes_down_after_n_publishes() -> None:
    async with MemoryBroker.from_url("memory://", record=True) as broker:
        broker.set_down(after=2)
        await broker.publish(b"1", key="a")
        await broker.publish(b"2", key="b")
        with pytest.raises(BackendUnavailableError):
            await broker.publish(b"3", key="c")
        broker.set_down(False)
        await broker.publish(b"3", key="c")
        assert [k for k, _ in broker.published] == ["a", "b", "c"]
        assert await broker.pending() == 3
