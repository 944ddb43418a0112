"""Crawlo's older module name for the Redis queue (``crawlo.queue.redis_priority_queue``)."""

from crawlherd.compat.crawlo.queue.backends.redis_priority import RedisPriorityQueue

__all__ = ["RedisPriorityQueue"]
