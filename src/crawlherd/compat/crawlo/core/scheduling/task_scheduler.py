"""Crawlo's ``Scheduler`` (``crawlo.core.scheduling.task_scheduler``): duplicate filter, then the queue,
with Crawlo's full-queue policy -- on crawlherd's frontier.

``Scheduler.create_instance(crawler)`` reads the crawler's settings (``FILTER_CLASS``, ``QUEUE_TYPE``,
``SCHEDULER_MAX_QUEUE_SIZE``, ``ENQUEUE_FULL_POLICY``, the ``REDIS_*`` settings, ``DEPTH_PRIORITY``);
``await scheduler.open()`` opens the queue. ``enqueue_request(request)``: a duplicate (unless
``dont_filter``) is counted and logged at DEBUG -- ``Filtered duplicate request: <url>`` -- and gives
False; otherwise the request is queued (DEBUG ``Request queued: <url>, Priority: <n>``) -- or, when
the queue stays full, handled by ``enqueue_full_policy``: ``drop_with_counter`` (WARNING, counted in
``scheduler/enqueue_dropped_count``, False), ``block`` (waits up to ``ENQUEUE_BLOCK_TIMEOUT``, None for
ever, then drops), ``raise`` (``QueueFullTimeout``). ``next_request()`` gives a Crawlo ``Request``
(callbacks restored from the spider) or None; from a Redis queue it is settled as it is handed out,
as Crawlo's ZSET queue does; ``next_request_with_ack()`` keeps it leased until ``ack_request`` /
``nack_request``. All log lines go to the ``crawlherd.crawlo`` logger.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from crawlherd.compat.crawlo.filters import setting
from crawlherd.compat.crawlo.filters.aioredis_filter import AioRedisFilter
from crawlherd.compat.crawlo.filters.memory_filter import MemoryFileFilter, MemoryFilter
from crawlherd.compat.crawlo.queue.config import QueueConfig
from crawlherd.compat.crawlo.queue.exceptions import QueueFullTimeout
from crawlherd.compat.crawlo.queue.queue_manager import QueueManager
from crawlherd.compat.crawlo.queue.queue_types import QueueType
from crawlherd.errors import ConfigurationError

__all__ = ["Scheduler"]

log = logging.getLogger("crawlherd.crawlo")

#: Crawlo's filter names, and the classes they mean here.
_FILTERS: dict[str, type[Any]] = {
    "MemoryFilter": MemoryFilter,
    "MemoryFileFilter": MemoryFileFilter,
    "AioRedisFilter": AioRedisFilter,
}


def filter_class(name: str) -> type[Any]:
    """The filter class of a ``FILTER_CLASS`` setting: Crawlo's dotted names (``crawlo.filters.MemoryFilter``,
    ``crawlo.filters.aioredis_filter.AioRedisFilter`` ...) or any importable ``module.Class``."""
    short = name.rsplit(".", 1)[-1]
    if name.startswith("crawlo.") or "." not in name:
        if short in _FILTERS:
            return _FILTERS[short]
        raise ConfigurationError(f"FILTER_CLASS={name!r}: crawlherd has {sorted(_FILTERS)}")
    module, _, attr = name.rpartition(".")
    found: type[Any] = getattr(importlib.import_module(module), attr)
    return found


class Scheduler:
    """``Scheduler(crawler, dupe_filter, stats, priority)``: see the module docstring."""

    def __init__(self, crawler: Any, dupe_filter: Any, stats: Any, priority: int) -> None:
        self.crawler = crawler
        self.queue_manager: QueueManager | Any = None
        self.stats = stats
        self.dupe_filter = dupe_filter
        self.priority = priority
        self.logger = log
        self._duplicate_filtered_count = 0

    @classmethod
    def create_instance(cls, crawler: Any) -> Scheduler:
        name = str(setting(crawler, "FILTER_CLASS", "crawlo.filters.MemoryFilter"))
        dupe_filter = filter_class(name).create_instance(crawler)
        return cls(crawler, dupe_filter, getattr(crawler, "stats", None), int(setting(crawler, "DEPTH_PRIORITY", 0)))

    async def open(self) -> None:
        """Open the queue the settings name (``QUEUE_TYPE`` ...)."""
        settings = getattr(self.crawler, "settings", None)
        config = QueueConfig.from_settings(settings) if settings is not None else QueueConfig(queue_type="memory")
        self.queue_manager = QueueManager(config)
        await self.queue_manager.initialize()
        if self.queue_manager.queue_type in (QueueType.REDIS, QueueType.REDIS_STREAM) and isinstance(
            self.dupe_filter, MemoryFilter
        ):
            log.warning("a Redis queue with a MemoryFilter: each process filters duplicates on its own; "
                        "FILTER_CLASS = 'crawlo.filters.AioRedisFilter' shares the filter")

    @property
    def pending_enqueue_count(self) -> int:
        """Enqueues waiting for room in the queue right now."""
        if self.queue_manager is None:
            return 0
        return int(getattr(self.queue_manager, "pending_enqueue_count", 0) or 0)

    async def _is_duplicate(self, request: Any) -> bool:
        check = getattr(self.dupe_filter, "requested_async", None)
        if check is not None:
            return bool(await check(request))
        return bool(self.dupe_filter.requested(request))

    async def enqueue_request(self, request: Any) -> bool:
        """Filter, then queue ``request``: True when it was queued."""
        if not getattr(request, "dont_filter", False) and await self._is_duplicate(request):
            if hasattr(self.dupe_filter, "log_stats"):
                self.dupe_filter.log_stats(request)
            self._duplicate_filtered_count += 1
            log.debug("Filtered duplicate request: %s", request.url)
            return False
        if self.queue_manager is None:
            log.error("Queue manager not initialized: call await scheduler.open() first")
            return False
        self._depth_priority(request)
        policy = self._policy()
        try:
            queued = bool(await self.queue_manager.put(request, priority=getattr(request, "priority", 0),
                                                       timeout=self._put_timeout(policy)))
        except QueueFullTimeout as exc:
            if policy == "raise":
                raise
            if self.stats is not None:
                self.stats.inc_value("scheduler/enqueue_dropped_count")
            log.warning("Queue is full: %s dropped (%s)", request.url, exc)
            return False
        if queued:
            log.debug("Request queued: %s, Priority: %s", request.url, getattr(request, "priority", 0))
        return queued

    def _depth_priority(self, request: Any) -> None:
        """Crawlo's ``DEPTH_PRIORITY``: a request's (negated) priority moves by depth x DEPTH_PRIORITY
        (positive: deeper first; negative: shallower first)."""
        meta = getattr(request, "meta", None)
        if not isinstance(meta, dict):
            return
        depth = int(meta.setdefault("depth", 1))
        if self.priority:
            request.priority -= depth * self.priority

    def _config(self) -> Any:
        return getattr(self.queue_manager, "config", None)

    def _policy(self) -> str:
        return str(getattr(self._config(), "enqueue_full_policy", "drop_with_counter"))

    def _put_timeout(self, policy: str) -> float | None:
        config = self._config()
        if policy == "block":
            value = getattr(config, "enqueue_block_timeout", None)
        else:
            value = getattr(config, "enqueue_drop_timeout", 50.0)
        return None if value is None else float(value)

    def _restore(self, request: Any) -> Any:
        """Callbacks stored by name (a Redis queue) become the spider's methods again."""
        spider = getattr(self.crawler, "spider", None)
        for name in ("callback", "errback"):
            value = getattr(request, name, None)
            if isinstance(value, str):
                setattr(request, name, getattr(spider, value, None) if spider is not None else None)
        return request

    async def next_request(self) -> Any:
        """The next request (a Crawlo ``Request``), or None when the queue has nothing now."""
        if self.queue_manager is None:
            return None
        request = await self.queue_manager.get()
        if request is None:
            return None
        await self.queue_manager.ack(request)
        return self._restore(request)

    async def next_request_with_ack(self) -> tuple[Any, Any]:
        """``(request, receipt)``: the request stays leased until :meth:`ack_request` or :meth:`nack_request`."""
        if self.queue_manager is None:
            return None, None
        request = await self.queue_manager.get()
        if request is None:
            return None, None
        return self._restore(request), request

    async def ack_request(self, receipt: Any) -> None:
        if self.queue_manager is not None and receipt is not None:
            await self.queue_manager.ack(receipt)

    async def nack_request(self, receipt: Any, reason: str = "failed") -> None:
        if self.queue_manager is not None and receipt is not None:
            await self.queue_manager.fail(receipt, reason)

    async def async_idle(self) -> bool:
        return self.queue_manager is None or await self.queue_manager.size() == 0

    async def async_size(self) -> int:
        return 0 if self.queue_manager is None else int(await self.queue_manager.size())

    async def close(self) -> None:
        if self.queue_manager is not None:
            await self.queue_manager.close()
        closed = getattr(self.dupe_filter, "closed", None)
        if closed is not None:
            await closed()
