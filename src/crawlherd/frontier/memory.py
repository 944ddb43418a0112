"""``memory://``: the in-process frontier. The reference implementation of :class:`Frontier`, the
default for one-process crawls, and the test double for the others. It dies with its process; use
``sqlite://`` or ``redis://`` when the crawl must survive one.

The requests live in the host-aware heap index (:mod:`crawlherd.frontier._index`, O(log n) per
operation), which the ``sqlite://`` backend uses too; this module adds the duplicate filter, the
attempt counts of retried requests, the size bound and the counters.

The common case of ``arun_many`` -- new requests of one priority, none delayed, nothing else queued --
takes a cheaper path, the *lane*: a FIFO of ``(seq, request)`` that hands its head out while that
head's host may be fetched now (no delay, not blocked, no robots.txt pending, below its cap), which is
exactly the request the index would pick then. Anything else -- another priority, a delayed, retried
or expired request, a host that must wait -- first moves the lane into the index under the sequence
numbers its requests were queued with (:meth:`MemoryFrontier._spill`), so the order is the index's
order in every case.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from crawlherd._aio import AsyncClosing
from crawlherd.errors import LeaseError
from crawlherd.frontier._index import Held, HostIndex, HostSlot
from crawlherd.frontier._waiting import WaitingMixin
from crawlherd.frontier.base import FrontierStats, Lease
from crawlherd.frontier.dupefilter import fp_to_int, make_dupefilter
from crawlherd.frontier.options import FrontierOptions, HostPolicy
from crawlherd.request import Request

__all__ = ["MemoryFrontier"]

_PULL = 64  # requests a lazy enqueue gives the queue at a time


class MemoryFrontier(AsyncClosing, WaitingMixin):
    """In-process frontier; see the module docstring. Create it with :func:`open_scheduler`."""

    def __init__(self, options: FrontierOptions | None = None) -> None:
        self.options = opts = options or FrontierOptions()
        self._clock = opts.clock
        self._seen = make_dupefilter(opts.dupefilter, capacity=opts.capacity, error_rate=opts.error_rate)
        self._index: HostIndex[Request] = HostIndex(opts, opts.host_policies)
        # The lane (see the module docstring): queued only while the index has nothing queued.
        self._lane: deque[tuple[int, Request]] = deque()
        self._lane_priority = 0
        # A lazy enqueue (enqueue_lazily): the requests not taken yet, the sequence numbers reserved
        # for them (from _feed_seq up to _feed_end) and their priority (None until the first is taken).
        self._feed: Iterator[Request] | None = None
        self._feed_seq = self._feed_end = 0
        self._feed_priority: int | None = None
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
        return f"<MemoryFrontier queued={self._queued()} in_flight={len(self._index.leases)}>"

    def _queued(self) -> int:
        return self._index.queued + len(self._lane)

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        if self._feed is not None:
            self._materialise(self._clock.now())
        fp = fp_to_int(request.fingerprint)
        max_size = self.options.max_size
        while max_size and (queued := self._queued()) >= max_size:
            if fp in self._seen:
                self._duplicates += 1
                return False
            await self._when_full(request.url, queued=queued)
        if not self._seen.add(fp):
            self._duplicates += 1
            return False
        self._enqueued += 1
        self._add(request, self._clock.now())
        self._notify()
        return True

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        if self.options.max_size:  # each may have to wait for room
            n = 0
            for request in requests:
                if await self.enqueue_request(request):
                    n += 1
            return n
        now = self._clock.now()
        if self._feed is not None:
            self._materialise(now)
        n = self._take_new(requests, now, None)
        if n:
            self._notify()
        return n

    async def enqueue_lazily(self, requests: Iterable[Request], count: int) -> None:
        """Queue the ``count`` requests of ``requests`` as :meth:`enqueue_requests` would now -- same
        order, same duplicate filter, the same sequence numbers -- but take each out of the iterable
        only when the frontier is about to hand it out, so that a long list is not held as ``count``
        request objects (``arun_many`` makes its requests this way as the dispatcher pulls them).

        The requests must all have one priority and no ``not_before``, and there must be ``count`` of
        them (else ``ValueError`` when that is found out); the iterable must not raise. Their sequence numbers
        are taken now, so nothing queued later overtakes them; an enqueue (the duplicate filter), a
        robots request, and the questions about counts (``size``, ``stats``, ``idle``...) first take
        whatever is left of them. A frontier with a ``max_size``, or with something queued, queues
        them at once."""
        now = self._clock.now()
        if self.options.max_size or self._lane or self._index.queued or self._feed is not None:
            await self.enqueue_requests(requests)
            return
        seq = self._index.next_seq(now)
        for _ in range(count - 1):  # reserved now: the time marks of oldest_queued_age are right
            self._index.next_seq(now)
        self._feed = iter(requests)
        self._feed_seq = seq
        self._feed_end = seq + count
        self._feed_priority = None
        self._notify()

    async def enqueue_many(self, requests: Sequence[Request]) -> list[bool]:
        """See :meth:`~crawlherd.frontier.base.EnqueueMany.enqueue_many`."""
        if self.options.max_size:  # each may have to wait for room
            return [await self.enqueue_request(request) for request in requests]
        now = self._clock.now()
        if self._feed is not None:
            self._materialise(now)
        flags: list[bool] = []
        if self._take_new(requests, now, None, flags):
            self._notify()
        return flags

    def _take_new(
        self, requests: Iterable[Request], now: float, seqs: Iterator[int] | None, flags: list[bool] | None = None
    ) -> int:
        """Queue the requests the duplicate filter lets through (under ``seqs``, else new sequence
        numbers); count them and the duplicates (and say which were queued in ``flags``). How many
        were queued."""
        seen = self._seen
        place = self._place
        next_seq = self._index.next_seq
        n = dups = 0
        for request in requests:
            seq = -1 if seqs is None else next(seqs)
            new = seen.add(fp_to_int(request.fingerprint))
            if flags is not None:
                flags.append(new)
            if new:
                place(request, next_seq(now) if seq < 0 else seq, now)
                n += 1
            else:
                dups += 1
        self._enqueued += n
        self._duplicates += dups
        return n

    def _add(self, request: Request, now: float) -> None:
        """Queue ``request``, a new one (the duplicate filter has it)."""
        if self._feed is not None:
            self._materialise(now)
        self._place(request, self._index.next_seq(now), now)

    def _place(self, request: Request, seq: int, now: float) -> None:
        """Queue ``request`` under ``seq``: in the lane when it may go there, else in the index."""
        index = self._index
        lane = self._lane
        priority = request.priority
        not_before = request.not_before
        if not index.queued and (not_before is None or not_before <= now):
            if not lane:
                self._lane_priority = priority
                lane.append((seq, request))
                return
            if priority == self._lane_priority:
                lane.append((seq, request))
                return
        if lane:
            self._spill(now)
        index.add(request, request.host, priority, seq, not_before, now)

    def _spill(self, now: float) -> None:
        """Move the lane (and what is left of a lazy enqueue) into the index, each request under the
        sequence number it was queued with."""
        if self._feed is not None:
            self._materialise(now)
        lane = self._lane
        add = self._index.add
        priority = self._lane_priority
        while lane:
            seq, request = lane.popleft()
            add(request, request.host, priority, seq, None, now)

    def _pull(self, now: float, limit: int) -> None:
        """Take up to ``limit`` requests of the lazy enqueue (:meth:`enqueue_lazily`) into the queue."""
        feed = self._feed
        assert feed is not None
        self._feed = None  # while taking: what is called from here sees no feed
        seq = self._feed_seq
        take = min(limit, self._feed_end - seq)
        taken = list(itertools.islice(feed, take))
        priority = self._feed_priority
        for request in taken:
            if priority is None:
                priority = self._feed_priority = request.priority
            if request.priority != priority or request.not_before is not None:
                raise ValueError(
                    f"enqueue_lazily: {request!r} has another priority or a not_before; the requests of one lazy "
                    "enqueue must all have one priority and no not_before"
                )
        self._take_new(taken, now, itertools.count(seq))
        self._feed_seq = seq = seq + len(taken)
        if len(taken) < take:
            return  # fewer than promised: their sequence numbers stay unused
        if seq < self._feed_end:
            self._feed = feed
        elif next(feed, None) is not None:
            raise ValueError("enqueue_lazily: the iterable held more requests than the count given")

    def _materialise(self, now: float) -> None:
        """Queue everything left of the lazy enqueue."""
        self._pull(now, self._feed_end)

    async def enqueue_robots(self, request: Request) -> bool:
        host = request.host
        if host in self._robots_hosts:
            return False
        self._robots_hosts.add(host)
        self._enqueued += 1
        now = self._clock.now()
        if self._lane or self._feed is not None:
            self._spill(now)  # the host's pages wait for its robots.txt: the index keeps that
        self._index.add_robots(request, host, request.priority, self._index.next_seq(now), now)
        self._notify()
        return True

    # -- lease -------------------------------------------------------------------------------------

    async def next_request(self) -> Lease | None:
        return self._next(self._clock.now())

    async def wait_next(self, timeout: float | None = None) -> Lease | None:
        if not self._closed:  # a lease ready now: no waiting machinery
            lease = self._next(self._clock.now())
            if lease is not None:
                return lease
        return await super().wait_next(timeout)

    def _next(self, now: float) -> Lease | None:
        index = self._index
        if (index.timers or index.delayed or index.leases) and index.due(now):
            self._expired += len(index.refresh(now))
        lane = self._lane
        while not lane and self._feed is not None:
            self._pull(now, _PULL)
        if lane:
            if not index.queued:
                request = lane[0][1]
                name = request.host
                h = index.hosts.get(name) or index.host(name)
                if not h.delay and not h.pending and h.ready_at <= now and h.in_flight < h.max_in_flight:
                    lane.popleft()
                    h.in_flight += 1
                    return self._lease(request, h, self._lane_priority, False, now)
            self._spill(now)  # the index decides
        popped = index.pop(now)
        if popped is None:
            return None
        h, priority, req, robots = popped
        return self._lease(req, h, priority, robots, now)

    def _lease(self, req: Request, h: HostSlot[Request], priority: int, robots: bool, now: float) -> Lease:
        token = str(next(self._tokens))
        attempt = self._attempts.get(req.fingerprint, 0) + 1 if self._attempts else 1
        lease = Lease(token, req, now + self.options.lease_timeout, attempt)
        self._index.leases[token] = Held(req, h, priority, lease.expires_at, robots)
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
        return self._busy(), self._index.next_wakeup()

    def _busy(self) -> bool:
        if self._lane or self._index.busy():
            return True
        while self._feed is not None and not self._lane:  # what is left may all be duplicates
            self._pull(self._clock.now(), _PULL)
        return bool(self._lane) or self._index.busy()

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
        return self._busy()

    async def idle(self) -> bool:
        return not self._busy()

    async def size(self) -> int:
        if self._feed is not None:
            self._materialise(self._clock.now())
        return self._queued()

    async def stats(self) -> FrontierStats:
        now = self._clock.now()
        if self._lane or self._feed is not None:
            self._spill(now)  # the index's per-host figures then count every request
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
