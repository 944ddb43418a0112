"""Crawlo's ``QueueManager`` (``crawlo.queue.queue_manager``): one front for the memory and Redis
queues, with Crawlo's full-queue back-pressure.

``put(request, priority, timeout=None)``: when the queue holds ``max_queue_size`` requests the call
waits until a ``get`` makes room (each ``get`` that takes something wakes the waiters); past
``timeout`` seconds it raises :class:`~crawlherd.compat.crawlo.queue.exceptions.QueueFullTimeout`, and the
scheduler applies ``enqueue_full_policy``. While calls wait, :attr:`pending_enqueue_count` says how
many, so that an engine does not take a crawl whose enqueues are blocked for a finished one
(:func:`crawlherd.compat.crawlo.core.engine.has_pending_enqueues`).

``queue_type``: ``memory`` (:class:`SpiderPriorityQueue`), ``redis`` / ``redis_stream``
(:class:`RedisPriorityQueue`), ``auto`` (Redis when it answers, else memory, with a WARNING), ``disk``
refused (crawlherd's on-disk frontier is ``sqlite://``). :func:`register_queue_backend` replaces the
backend built for a type (``builder(manager)``, a coroutine function).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from crawlherd.compat.crawlo.queue.backends.memory import SpiderPriorityQueue
from crawlherd.compat.crawlo.queue.backends.redis_priority import RedisPriorityQueue
from crawlherd.compat.crawlo.queue.config import QueueConfig
from crawlherd.compat.crawlo.queue.exceptions import QueueFullTimeout
from crawlherd.compat.crawlo.queue.priority_calculator import PriorityCalculator
from crawlherd.compat.crawlo.queue.queue_types import QueueType
from crawlherd.errors import BackendUnavailableError, ConfigurationError

__all__ = ["QueueManager", "register_queue_backend", "unregister_queue_backend"]

log = logging.getLogger("crawlherd.crawlo")

Builder = Callable[["QueueManager"], Awaitable[Any]]
#: Backends registered in place of the built-in one of a queue type.
_QUEUE_BUILDERS: dict[QueueType, Builder] = {}


def _queue_type(value: QueueType | str) -> QueueType:
    if isinstance(value, QueueType):
        return value
    try:
        return QueueType.from_string(str(value))
    except ValueError:
        raise ValueError(f"unknown queue type {value!r}: use one of {[m.value for m in QueueType]}") from None


def register_queue_backend(queue_type: QueueType | str, builder: Builder) -> None:
    """Build the queue of ``queue_type`` with ``await builder(manager)`` from now on."""
    if builder is None or not callable(builder):
        raise ValueError(f"register_queue_backend: builder must be callable, got {builder!r}")
    _QUEUE_BUILDERS[_queue_type(queue_type)] = builder


def unregister_queue_backend(queue_type: QueueType | str) -> bool:
    """Back to the built-in backend of ``queue_type``: True when one was registered."""
    return _QUEUE_BUILDERS.pop(_queue_type(queue_type), None) is not None


class _Switch:
    """Crawlo's back-pressure controller slot: crawlherd's back-pressure is the wait for room."""

    enabled = False
    active = False


class QueueManager:
    """``QueueManager(config: QueueConfig)``; ``await manager.initialize()`` before use."""

    def __init__(self, config: QueueConfig | None = None) -> None:
        self.config = config or QueueConfig()
        self._queue: Any = None
        self._queue_type: QueueType | None = None
        self._queue_semaphore: asyncio.Semaphore | None = None
        self._backpressure_controller: Any = _Switch()
        self._priority_calculator = PriorityCalculator()
        self._queue_not_full = asyncio.Condition()
        self._pending_enqueue_count = 0

    @property
    def queue_type(self) -> QueueType | None:
        return self._queue_type

    @property
    def max_size(self) -> int:
        return self.config.max_queue_size

    @property
    def pending_enqueue_count(self) -> int:
        """Enqueues waiting for room right now."""
        return self._pending_enqueue_count

    async def initialize(self) -> bool:
        """Open the queue of the configured type: True when it is ready."""
        wanted = self.config.queue_type
        if wanted is QueueType.DISK:
            raise ConfigurationError("queue_type='disk': crawlherd's on-disk frontier is sqlite:// (open_scheduler)")
        if wanted is QueueType.AUTO:
            wanted = await self._auto()
        self._queue_type = wanted
        builder = _QUEUE_BUILDERS.get(wanted)
        if builder is not None:
            self._queue = await builder(self)
        elif wanted is QueueType.MEMORY:
            self._queue = SpiderPriorityQueue()
        else:
            self._queue = self._redis_queue()
            await self._queue.connect()
        log.debug("Queue initialized successfully Type: %s", wanted.value)
        return True

    def _redis_queue(self) -> RedisPriorityQueue:
        c = self.config
        return RedisPriorityQueue(redis_url=c.redis_url, queue_name=c.queue_name, max_retries=c.max_retries,
                                  timeout=c.timeout, serialization_format=c.serialization_format)

    async def _auto(self) -> QueueType:
        probe = self._redis_queue()
        try:
            await probe.connect(max_retries=1, delay=0)
        except BackendUnavailableError as exc:
            log.warning("queue_type='auto': Redis at %s does not answer (%s); using a memory queue",
                        self.config.redis_url, exc)
            return QueueType.MEMORY
        finally:
            await probe.close()
        return QueueType.REDIS

    async def put(self, request: Any, priority: int = 0, *, timeout: float | None = None) -> bool:
        """Queue ``request``; when full, wait for room up to ``timeout`` seconds (None: for ever), then
        raise QueueFullTimeout."""
        if self._queue is None:
            raise RuntimeError("QueueManager.put before initialize()")
        self._priority_calculator.update_stats(request)
        max_size = self.config.max_queue_size
        if (size := await self.size()) >= max_size:
            if not self._backpressure_controller.active:
                log.info("Queue full (%s/%s), blocking enqueue (timeout=%s): %s", size, max_size, timeout, request.url)
            self._pending_enqueue_count += 1
            try:
                room = await self._wait_for_space(max_size, timeout)
            finally:
                self._pending_enqueue_count -= 1
            if not room:
                raise QueueFullTimeout(self.config.queue_name, timeout or 0.0, await self.size(), max_size)
        if self._queue_semaphore is not None:
            await self._queue_semaphore.acquire()
        queued = await self._queue.put(request, priority=priority)
        return queued is not False

    async def _wait_for_space(self, max_size: int, timeout: float | None) -> bool:
        """Wait until the queue holds fewer than ``max_size``: False when ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        async with self._queue_not_full:
            while await self.size() >= max_size:
                if deadline is None:
                    await self._queue_not_full.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._queue_not_full.wait()
            return True

    async def _notify_space_available(self) -> None:
        """Wake the enqueues waiting for room."""
        async with self._queue_not_full:
            self._queue_not_full.notify_all()

    async def get(self, timeout: float = 0.01) -> Any:
        """The next request, or None when none came within ``timeout`` seconds."""
        if self._queue is None:
            raise RuntimeError("QueueManager.get before initialize()")
        request = await self._queue.get(timeout=timeout)
        if request is not None:
            if self._queue_semaphore is not None:
                self._queue_semaphore.release()
            await self._notify_space_available()
        return request

    async def get_blocking(self, timeout: float = 30.0) -> Any:
        return await self.get(timeout=timeout)

    async def ack(self, request: Any) -> None:
        """Settle a request a Redis queue handed out (nothing to do for a memory queue)."""
        if hasattr(self._queue, "ack"):
            await self._queue.ack(request)

    async def fail(self, request: Any, reason: str = "") -> None:
        """A request a Redis queue handed out failed: it is handed out again (see RedisPriorityQueue.fail)."""
        if hasattr(self._queue, "fail"):
            await self._queue.fail(request, reason)

    async def size(self) -> int:
        if self._queue is None:
            return 0
        return int(await self._queue.size())

    async def async_empty(self) -> bool:
        return await self.size() == 0

    def get_status(self) -> dict[str, Any]:
        return {"type": self._queue_type.value if self._queue_type else "unknown",
                "health": "healthy" if self._queue is not None else "unknown",
                "pending_enqueues": self._pending_enqueue_count}

    async def close(self) -> None:
        queue, self._queue = self._queue, None
        if queue is not None and hasattr(queue, "close"):
            await queue.close()
        log.debug("Queue closed")
