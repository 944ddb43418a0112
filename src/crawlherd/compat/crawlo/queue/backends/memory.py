"""Crawlo's memory queue (``crawlo.queue.backends.memory``), on crawlherd's
:class:`~crawlherd.frontier.memory.MemoryFrontier`.

Crawlo's contract: ``put(item, priority)`` (the smallest priority is taken first; equal ones in the
order put), ``get(timeout)`` the item itself or None when nothing came within ``timeout`` seconds, a
``maxsize`` beyond which ``put`` waits for room, and no duplicate filtering (that is the filter's job:
the same URL put twice is queued twice). Each item is a frontier request of its own (a fresh
``dedup_key``); ``get`` leases it and settles the lease at once -- an item taken is gone, as in
Crawlo.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from crawlherd.compat.crawlo.queue.exceptions import QueueClosedError
from crawlherd.frontier.memory import MemoryFrontier
from crawlherd.frontier.options import FrontierOptions
from crawlherd.request import Request as FrontierRequest

__all__ = ["SpiderPriorityQueue"]

log = logging.getLogger("crawlherd.crawlo")
_KEY = "crawlo.item"


def frontier_request(item: Any, priority: int, number: int, meta: dict[str, Any]) -> FrontierRequest:
    """``item`` (anything with a ``.url``) as a frontier request: Crawlo's "smallest first" made
    crawlherd's "largest first", and a ``dedup_key`` of its own so that nothing is filtered here."""
    url = getattr(item, "url", None)
    if not isinstance(url, str):
        raise TypeError(f"a crawlherd-backed queue holds requests (objects with a .url), not {type(item).__name__}")
    return FrontierRequest(url, method=getattr(item, "method", "GET") or "GET", priority=-int(priority),
                           meta=meta, dedup_key=f"crawlo-queue:{number}")


class SpiderPriorityQueue:
    """``SpiderPriorityQueue(maxsize=0)`` (0: unbounded). ``backpressure_threshold`` (0.8): the share of
    ``maxsize`` past which a WARNING says the queue is filling up (once, until it drains under it)."""

    def __init__(self, maxsize: int = 0) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize={maxsize!r}: must be an int >= 0 (0: unbounded)")
        self.maxsize = maxsize
        self.backpressure_threshold = 0.8
        self._frontier = MemoryFrontier(FrontierOptions(max_size=maxsize, full_policy="block", max_in_flight=1_000_000))
        self._items: dict[int, Any] = {}
        self._numbers = itertools.count()
        self._warned = False
        self._closed = False

    def __repr__(self) -> str:
        return f"<SpiderPriorityQueue size={len(self._items)} maxsize={self.maxsize}>"

    async def put(self, item: Any, priority: int = 0) -> None:
        """Queue ``item``; with a ``maxsize``, wait while the queue is full. QueueClosedError once closed."""
        if self._closed:
            raise QueueClosedError("the queue was closed")
        number = next(self._numbers)
        request = frontier_request(item, priority, number, {_KEY: number})
        self._items[number] = item
        try:
            await self._frontier.enqueue_request(request)
        except BaseException:
            self._items.pop(number, None)
            raise
        self._watch_fill()

    def _watch_fill(self) -> None:
        if not self.maxsize:
            return
        filled = len(self._items) / self.maxsize
        if filled >= self.backpressure_threshold and not self._warned:
            self._warned = True
            log.warning("queue %.0f%% full (%s/%s): enqueues will wait for room at 100%%", filled * 100,
                        len(self._items), self.maxsize)
        elif filled < self.backpressure_threshold:
            self._warned = False

    async def get(self, timeout: float = 0.01) -> Any:
        """The next item (smallest priority first), or None when none came within ``timeout``
        seconds (0 or less: wait while something is queued)."""
        lease = await self._frontier.wait_next(timeout if timeout > 0 else None)
        if lease is None:
            return None
        await self._frontier.ack(lease)
        self._watch_fill()
        return self._items.pop(int(lease.request.meta[_KEY]))

    async def size(self) -> int:
        return await self._frontier.size()

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return bool(self.maxsize) and len(self._items) >= self.maxsize

    async def close(self) -> None:
        """Close the frontier: a later ``put`` raises QueueClosedError."""
        self._closed = True
        await self._frontier.close()
        self._items.clear()
