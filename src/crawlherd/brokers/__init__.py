"""Message brokers, chosen by URL: ``sqlite:///path`` (default: a table in the config DB file),
``redis://`` (Streams; ``redis+cluster://`` the same on a Redis Cluster), ``amqp://`` (RabbitMQ through
aio-pika), ``sqs://`` (Amazon SQS through aiobotocore), ``memory://`` (in-process reference)."""

from __future__ import annotations

from typing import Any

from crawlherd._registry import open_backend, redis_aliases
from crawlherd.brokers.base import Broker, DeadLetter, Delivery

__all__ = ["BROKER_ALIASES", "Broker", "DeadLetter", "Delivery", "open_broker"]

BROKER_ALIASES: dict[str, str] = {
    "memory": "crawlherd.brokers.memory:MemoryBroker",
    "sqlite": "crawlherd.brokers.sqlite:SQLiteBroker",
    **redis_aliases("crawlherd.brokers.redis:RedisBroker"),
    "amqp": "crawlherd.brokers.amqp:AMQPBroker",
    "amqps": "crawlherd.brokers.amqp:AMQPBroker",
    "sqs": "crawlherd.brokers.sqs:SQSBroker",
    "celery": "crawlherd.contrib.celery:CeleryTaskBroker",  # celery+<Celery broker URL>: jobs as Celery tasks
}


def open_broker(url: str, **options: Any) -> Broker:
    """A broker for ``url``; use it as ``async with open_broker(url) as broker: ...``."""
    broker: Broker = open_backend(url, BROKER_ALIASES, "broker", **options)
    return broker
