"""Crawlo's Redis queue (``crawlo.queue.backends.redis_priority``), on crawlherd's Redis frontier
(``redis://...?prefix=<queue_name>``): shared by every process of a crawl and kept across restarts.

``get`` hands out a request under a lease, as Crawlo's processing queue does: :meth:`ack` settles
it, :meth:`fail` puts it back (until ``max_retries``, then it is dropped with its reason), and one
neither acked nor failed within ``timeout`` seconds is handed out again. Requests travel as JSON:
callbacks by name (the scheduler restores them from the spider), ``meta`` and ``cb_kwargs`` as JSON
values -- a value that is not JSON is refused when it is put. ``serialization_format`` is kept for
Crawlo's signature; crawlherd never unpickles what it reads from a shared Redis.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from crawlherd.errors import BackendUnavailableError, ConfigurationError
from crawlherd.frontier import Frontier, Lease, open_scheduler
from crawlherd.request import Request as FrontierRequest

__all__ = ["RedisPriorityQueue"]

log = logging.getLogger("crawlherd.crawlo")
_KEY = "crawlo"


def _name(fn: Any) -> str | None:
    return None if fn is None else fn if isinstance(fn, str) else getattr(fn, "__name__", None)


def encode(item: Any) -> dict[str, Any]:
    """What the frontier keeps of a Crawlo request besides its URL, method, headers and body."""
    return {
        "callback": _name(getattr(item, "callback", None)),
        "errback": _name(getattr(item, "errback", None)),
        "meta": dict(getattr(item, "meta", None) or {}),
        "cb_kwargs": dict(getattr(item, "cb_kwargs", None) or {}),
        "dont_filter": bool(getattr(item, "dont_filter", False)),
        "priority": -int(getattr(item, "priority", 0) or 0),
        "flags": list(getattr(item, "flags", None) or []),
        "body": base64.b64encode(getattr(item, "body", b"") or b"").decode(),
    }


def decode(request: FrontierRequest) -> Any:
    """The Crawlo request a frontier request carries (callbacks as names)."""
    from crawlherd.compat.crawlo.http.request import Request

    data = request.meta.get(_KEY, {})
    made = Request(
        request.url, method=request.method, headers=dict(request.headers or {}),
        body=base64.b64decode(data.get("body", "")),
        meta=data.get("meta"), cb_kwargs=data.get("cb_kwargs"), priority=int(data.get("priority", 0)),
        dont_filter=bool(data.get("dont_filter", False)), flags=data.get("flags"),
    )
    made.callback = data.get("callback")
    made.errback = data.get("errback")
    return made


class RedisPriorityQueue:
    """``RedisPriorityQueue(redis_url=None, queue_name=None, failed_queue=None, max_retries=3, timeout=300,
    max_connections=10, project_name="default", spider_name=None, serialization_format="pickle")``.
    ``queue_name`` defaults to ``crawlo:<project>[:<spider>]:queue:requests`` (the frontier's key
    prefix), ``failed_queue`` to the same with ``failed`` (the name of the frontier's failed set)."""

    def __init__(
        self,
        redis_url: str | None = None,
        queue_name: str | None = None,
        failed_queue: str | None = None,
        max_retries: int = 3,
        timeout: int = 300,
        max_connections: int = 10,
        project_name: str = "default",
        spider_name: str | None = None,
        serialization_format: str = "pickle",
        **options: Any,
    ) -> None:
        if serialization_format not in ("pickle", "json"):
            raise ConfigurationError(f"serialization_format={serialization_format!r}: use 'pickle' or 'json'")
        base = f"crawlo:{project_name}" + (f":{spider_name}" if spider_name else "")
        self.redis_url = redis_url or "redis://127.0.0.1:6379/0"
        self.queue_name = queue_name or f"{base}:queue:requests"
        self.failed_queue = failed_queue or self.queue_name.rsplit(":", 1)[0] + ":failed"
        self.max_retries = max_retries
        self.timeout = timeout
        self.max_connections = max_connections
        self.project_name = project_name
        self.spider_name = spider_name
        self.serialization_format = serialization_format
        self.options = options
        self._frontier: Frontier | None = None
        self._leases: dict[int, Lease] = {}
        self._attempts: dict[bytes, int] = {}
        self._numbers = itertools.count()
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<RedisPriorityQueue {self.queue_name}>"

    async def connect(self, max_retries: int = 3, delay: float = 1) -> None:
        """Open the frontier and check that Redis answers (``max_retries`` tries, ``delay`` s apart);
        :class:`~crawlherd.errors.BackendUnavailableError` when it does not."""
        async with self._lock:
            if self._frontier is not None:
                return
            url = f"{self.redis_url}{'&' if '?' in self.redis_url else '?'}prefix={self.queue_name}"
            last: BaseException | None = None
            for attempt in range(max(1, max_retries)):
                frontier = open_scheduler(url, lease_timeout=float(self.timeout), max_in_flight=1_000_000)
                try:
                    await frontier.__aenter__()
                    await frontier.size()
                except BackendUnavailableError as exc:
                    last = exc
                    await frontier.close()
                    if attempt + 1 < max_retries and delay:
                        await asyncio.sleep(delay)
                    continue
                self._frontier = frontier
                return
            raise BackendUnavailableError(f"Redis queue {self.queue_name}: no connection ({last})", backend="redis")

    async def _ready(self) -> Frontier:
        if self._frontier is None:
            await self.connect()
        assert self._frontier is not None
        return self._frontier

    def _request(self, item: Any, priority: int) -> FrontierRequest:
        return FrontierRequest(
            item.url, method=getattr(item, "method", "GET") or "GET", priority=-int(priority),
            headers=dict(getattr(item, "headers", None) or {}) or None, meta={_KEY: encode(item)},
            dedup_key=f"crawlo-queue:{uuid.uuid4().hex}",
        )

    async def put(self, request: Any, priority: int = 0) -> bool:
        """Queue ``request`` (the smallest priority is taken first): True once it is in Redis."""
        frontier = await self._ready()
        queued = await frontier.enqueue_request(self._request(request, priority))
        if queued:
            log.debug("Request enqueued with json serialization (Project: %s, Spider: %s): %s", self.project_name,
                      self.spider_name, request.url)
        return queued

    async def put_batch(self, requests: Iterable[tuple[Any, int] | Any], batch_size: int = 50) -> int:
        """Queue ``(request, priority)`` pairs (or requests, priority 0), ``batch_size`` per round trip:
        how many were queued."""
        items = [r if isinstance(r, tuple) else (r, 0) for r in requests]
        if not items:
            return 0
        frontier = await self._ready()
        queued = 0
        for start in range(0, len(items), max(1, batch_size)):
            chunk = items[start:start + max(1, batch_size)]
            queued += await frontier.enqueue_requests(self._request(r, p) for r, p in chunk)
        return queued

    async def get(self, timeout: float = 5.0) -> Any:
        """The next request (smallest priority first), leased until :meth:`ack` / :meth:`fail`; None
        when none came within ``timeout`` seconds."""
        frontier = await self._ready()
        lease = await frontier.wait_next(timeout if timeout > 0 else None)
        if lease is None:
            return None
        request = decode(lease.request)
        self._leases[id(request)] = lease
        return request

    async def get_blocking(self, timeout: float = 30.0) -> Any:
        return await self.get(timeout)

    async def ack(self, request: Any) -> None:
        """The request is done."""
        lease = self._leases.pop(id(request), None)
        if lease is not None:
            await (await self._ready()).ack(lease)

    async def fail(self, request: Any, reason: str = "") -> None:
        """The request failed: handed out again, up to ``max_retries`` times, then dropped (logged)."""
        lease = self._leases.pop(id(request), None)
        if lease is None:
            return
        frontier = await self._ready()
        fp = lease.request.fingerprint
        attempts = self._attempts.get(fp, 0) + 1
        if attempts <= self.max_retries:
            self._attempts[fp] = attempts
            await frontier.retry(lease)
            return
        self._attempts.pop(fp, None)
        log.warning("%s failed %s times, dropped: %s", request.url, attempts, reason)
        await frontier.fail(lease, reason or "failed")

    async def size(self) -> int:
        return await (await self._ready()).size()

    async def close(self) -> None:
        frontier, self._frontier = self._frontier, None
        if frontier is not None:
            await frontier.close()
