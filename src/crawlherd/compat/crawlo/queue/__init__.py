"""Crawlo's queue layer (``crawlo.queue``) on crawlherd's frontier: :class:`QueueManager`,
:class:`QueueConfig`, :class:`QueueType`, the backends :class:`SpiderPriorityQueue` (memory) and
:class:`RedisPriorityQueue`, :func:`register_queue_backend` / :func:`unregister_queue_backend`."""

from __future__ import annotations

from crawlherd.compat.crawlo.queue.backends.memory import SpiderPriorityQueue
from crawlherd.compat.crawlo.queue.backends.redis_priority import RedisPriorityQueue
from crawlherd.compat.crawlo.queue.config import QueueConfig
from crawlherd.compat.crawlo.queue.queue_manager import QueueManager, register_queue_backend, unregister_queue_backend
from crawlherd.compat.crawlo.queue.queue_types import QueueType

__all__ = [
    "QueueConfig",
    "QueueManager",
    "QueueType",
    "RedisPriorityQueue",
    "SpiderPriorityQueue",
    "register_queue_backend",
    "unregister_queue_backend",
]
