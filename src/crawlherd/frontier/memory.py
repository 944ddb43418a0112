"""``memory://``: the in-process frontier. The reference implementation of :class:`Frontier`, the
default for one-process crawls, and the test double for the others. It dies with its process; use
``sqlite://`` or ``redis://`` when the crawl must survive one.

The requests live in the host-aware heap index (:mod:`crawlherd.frontier._index`, O(log n) per
operation), which the ``sqlite://`` backend uses too; this module adds the duplicate filter, the
attempt counts of retried requests, the size bound and the counters.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import Any

from crawlherd._aio import AsyncClosing
from crawlherd.errors import LeaseError
from crawlherd.frontier._index import Held, HostIndex
from crawlherd.frontier._waiting import WaitingMixin
from crawlherd.frontier.base import FrontierStats, Lease
from crawlherd.frontier.dupefilter import fp_to_int, make_dupefilter
from crawlherd.frontier.options import FrontierOptions, HostPolicy
from crawlherd.request import Request

__all__ = ["MemoryFrontier"]


class MemoryFrontier(AsyncClosing, WaitingMixin):
    """In-process frontier; see the module docstring. Create it with :func:`open_scheduler`."""

    def __init__(self, options: FrontierOptions | None = None) -> None:
        self.options = opts = options or FrontierOptions()
        self._clock = opts.clock
        self._seen = make_dupefilter(opts.dupefilter, capacity=opts.capacity, error_rate=opts.error_rate)
        self._index: HostIndex[Request] = HostIndex(opts, opts.host_policies)
        self._attempts: dict[bytes, int] = {}
        self._robots_hosts: set[str] = set()  # hosts whose robots request was queued (once each)
        self._tokens = itertools.count(1)
        self._changed: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._closed = False
        self._enqueued = self._duplicates = self._acked = self._retries = self._failures = self._expired = 0

    @classmethod
    def from_url(cls, url: str = "memory://", **options: Any) -> MemoryFrontier:
        opts, _ = FrontierOptions.build(url, options)
        return cls(opts)

    def __repr__(self) -> str:
        return f"<MemoryFrontier queued={self._index.queued} in_flight={len(self._index.leases)}>"

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        fp = fp_to_int(request.fingerprint)
        index = self._index
        max_size = self.options.max_size
        while max_size and index.queued >= max_size:
            if fp in self._seen:
                self._duplicates += 1
                return False
            await self._when_full(request.url, queued=index.queued)
        if not self._seen.add(fp):
            self._duplicates += 1
            return False
        self._enqueued += 1
        now = self._clock.now()
        index.add(request, request.host, request.priority, index.next_seq(now), request.not_before, now)
        self._notify()
        return True

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        n = 0
        for request in requests:
            if await self.enqueue_request(request):
                n += 1
        return n

    async def enqueue_robots(self, request: Request) -> bool:
        host = request.host
        if host in self._robots_hosts:
            return False
        self._robots_hosts.add(host)
        self._enqueued += 1
        now = self._clock.now()
        self._index.add_robots(request, host, request.priority, self._index.next_seq(now), now)
        self._notify()
        return True

    # -- lease -------------------------------------------------------------------------------------

    async def next_request(self) -> Lease | None:
        return self._next(self._clock.now())

    def _next(self, now: float) -> Lease | None:
        index = self._index
        if (index.timers or index.delayed or index.leases) and index.due(now):
            self._expired += len(index.refresh(now))
        popped = index.pop(now)
        if popped is None:
            return None
        h, priority, req, robots = popped
        token = str(next(self._tokens))
        attempt = self._attempts.get(req.fingerprint, 0) + 1 if self._attempts else 1
        lease = Lease(token, req, now + self.options.lease_timeout, attempt)
        index.leases[token] = Held(req, h, priority, lease.expires_at, robots)
        if self._room is not None:
            self._room_made()
        return lease

    async def next_requests(self, limit: int) -> list[Lease]:
        now = self._clock.now()
        out: list[Lease] = []
        while len(out) < limit:
            lease = self._next(now)
            if lease is None:
                break
            out.append(lease)
        return out

    async def _pending_and_wakeup(self) -> tuple[bool, float | None]:
        return self._index.busy(), self._index.next_wakeup()

    # -- settle ------------------------------------------------------------------------------------

    def _take(self, lease: Lease) -> Held[Request]:
        held = self._index.take(lease.token)
        if held is None:
            raise LeaseError(f"lease {lease.token} for {lease.request.url} is unknown, expired or settled")
        return held

    async def ack(self, lease: Lease) -> None:
        held = self._take(lease)
        self._acked += 1
        if self._attempts:
            self._attempts.pop(lease.request.fingerprint, None)
        self._index.settled(held.host, self._clock.now(), held.robots)
        self._notify()

    async def ack_many(self, leases: Iterable[Lease]) -> None:
        for lease in leases:
            await self.ack(lease)

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        held = self._take(lease)
        self._retries += 1
        self._attempts[lease.request.fingerprint] = lease.attempt
        now = self._clock.now()
        self._index.requeue(held, self._index.next_seq(now), now, delay)
        self._notify()

    async def fail(self, lease: Lease, reason: str) -> None:
        held = self._take(lease)
        self._failures += 1
        self._attempts.pop(lease.request.fingerprint, None)
        self._index.settled(held.host, self._clock.now(), held.robots)
        self._notify()

    # -- politeness --------------------------------------------------------------------------------

    async def block_host(self, host: str, until: float) -> None:
        self._index.block(host, until, self._clock.now())
        self._notify()

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        index = self._index
        policy = index.policies.get(host, HostPolicy()).updated(host, delay=delay, max_in_flight=max_in_flight)
        index.set_policy(host, policy, self._clock.now())
        self._notify()

    # -- introspection -----------------------------------------------------------------------------

    async def has_pending_requests(self) -> bool:
        return self._index.busy()

    async def idle(self) -> bool:
        return not self._index.busy()

    async def size(self) -> int:
        return self._index.queued

    async def stats(self) -> FrontierStats:
        now = self._clock.now()
        index = self._index
        oldest = index.oldest_queued_time()
        return FrontierStats(
            queued=index.queued,
            in_flight=len(index.leases),
            duplicates_filtered=self._duplicates,
            enqueued=self._enqueued,
            acked=self._acked,
            retries=self._retries,
            failures=self._failures,
            expired_leases=self._expired,
            oldest_queued_age=None if oldest is None else max(0.0, now - oldest),
            hosts=index.depth(),
            host_states=index.states(now),
        )

    async def close(self) -> None:
        self._begin_close()
