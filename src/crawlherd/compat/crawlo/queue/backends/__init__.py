"""Crawlo's queue backends (``crawlo.queue.backends``): :class:`SpiderPriorityQueue` (memory) and
:class:`RedisPriorityQueue`, both on crawlherd's frontier."""

from __future__ import annotations

from crawlherd.compat.crawlo.queue.backends.memory import SpiderPriorityQueue
from crawlherd.compat.crawlo.queue.backends.redis_priority import RedisPriorityQueue

__all__ = ["RedisPriorityQueue", "SpiderPriorityQueue"]
