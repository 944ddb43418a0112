"""``memory://``: the in-process frontier. The reference implementation of :class:`Frontier`, the
default for one-process crawls, and the test double for the others. It dies with its process; use
``sqlite://`` or ``redis://`` when the crawl must survive one.

Data structures (all O(log n) per operation):

- per host, a heap of ``(-priority, seq, request)``; ``seq`` is global, so FIFO ties;
- ``_ready``: a heap of ``(-priority, seq, host)`` holding the head of every host that may be fetched
  now; an entry is valid only while it is still that host's head (lazy deletion);
- ``_timers``: hosts waiting for their ``ready_at``; ``_delayed``: requests waiting for ``not_before``;
- ``_leases``: an ordered dict; every lease has the same timeout, so expiry order is insertion order.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from crawlherd.errors import LeaseError, QueueFullError
from crawlherd.frontier._hosts import HostSlot, policy_of, schedule_host
from crawlherd.frontier._waiting import WaitingMixin
from crawlherd.frontier.base import FrontierStats, Lease
from crawlherd.frontier.dupefilter import fp_to_int, make_dupefilter
from crawlherd.frontier.options import FrontierOptions, HostPolicy
from crawlherd.request import Request

__all__ = ["MemoryFrontier"]

_Entry = tuple[int, int, Request]


_Host = HostSlot[Request]


class MemoryFrontier(WaitingMixin):
    """In-process frontier; see the module docstring. Create it with :func:`open_scheduler`."""

    def __init__(self, options: FrontierOptions | None = None) -> None:
        self.options = opts = options or FrontierOptions()
        self._clock = opts.clock
        self._seen = make_dupefilter(opts.dupefilter, capacity=opts.capacity, error_rate=opts.error_rate)
        self._hosts: dict[str, _Host] = {}
        self._policies: dict[str, HostPolicy] = dict(opts.host_policies)
        self._ready: list[tuple[int, int, str]] = []
        self._timers: list[tuple[float, str]] = []
        self._delayed: list[tuple[float, int, Request]] = []
        self._leases: OrderedDict[str, tuple[Lease, _Host]] = OrderedDict()
        self._attempts: dict[bytes, int] = {}
        self._seq = itertools.count()
        self._seq_marks: list[tuple[int, float]] = []
        self._last_mark = float("-inf")
        self._tokens = itertools.count(1)
        self._queued = 0
        self._changed: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._closed = False
        self._enqueued = self._duplicates = self._acked = self._retries = self._failures = self._expired = 0

    @classmethod
    def from_url(cls, url: str = "memory://", **options: Any) -> MemoryFrontier:
        opts, _ = FrontierOptions.build(url, options)
        return cls(opts)

    async def __aenter__(self) -> MemoryFrontier:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<MemoryFrontier queued={self._queued} in_flight={len(self._leases)}>"

    # -- hosts -------------------------------------------------------------------------------------

    def _host(self, name: str) -> _Host:
        h = self._hosts.get(name)
        if h is None:
            h = self._hosts[name] = _Host(name, *self._policy(name))
        return h

    def _policy(self, name: str) -> tuple[float, int]:
        return policy_of(self.options, self._policies, name)

    def _schedule(self, h: _Host, now: float) -> None:
        """Put ``h`` where it belongs: in _ready if it may be fetched now, in _timers if later."""
        schedule_host(h, now, self._ready, self._timers)

    def _refresh(self, now: float) -> None:
        """Bring due timers, delayed requests and expired leases back into play."""
        leases = self._leases
        while leases:
            token = next(iter(leases))
            lease, h = leases[token]
            if lease.expires_at > now:
                break
            del leases[token]
            self._expired += 1
            h.in_flight -= 1
            self._push(h, lease.request, now)
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            _, seq, req = heapq.heappop(delayed)
            h = self._host(req.host)
            heapq.heappush(h.queue, (-req.priority, seq, req))
            self._schedule(h, now)
        timers = self._timers
        while timers and timers[0][0] <= now:
            at, name = heapq.heappop(timers)
            timed = self._hosts.get(name)
            if timed is not None and timed.timer_at == at:
                timed.timer_at = -1.0
                self._schedule(timed, now)

    def _new_seq(self, now: float) -> int:
        """The next sequence number; every second or so it is recorded with the time, which is how
        ``stats().oldest_queued_age`` is known without storing a time per request."""
        seq = next(self._seq)
        if now - self._last_mark >= 1.0:
            self._seq_marks.append((seq, now))
            self._last_mark = now
        return seq

    def _push(self, h: _Host, req: Request, now: float) -> None:
        heapq.heappush(h.queue, (-req.priority, self._new_seq(now), req))
        self._queued += 1
        self._schedule(h, now)

    def _due(self, now: float) -> bool:
        if self._timers and self._timers[0][0] <= now:
            return True
        if self._delayed and self._delayed[0][0] <= now:
            return True
        if self._leases:
            lease = self._leases[next(iter(self._leases))][0]
            return lease.expires_at <= now
        return False

    # -- enqueue -----------------------------------------------------------------------------------

    async def enqueue_request(self, request: Request) -> bool:
        fp = fp_to_int(request.fingerprint)
        max_size = self.options.max_size
        while max_size and self._queued >= max_size:
            if fp in self._seen:
                self._duplicates += 1
                return False
            if self.options.full_policy == "raise":
                raise QueueFullError(
                    f"frontier is full ({self._queued} >= max_size={max_size}); "
                    f"{request.url} was not queued and may be enqueued again later"
                )
            if self._room is None or self._room.done():
                self._room = asyncio.get_running_loop().create_future()
            await self._room
        if not self._seen.add(fp):
            self._duplicates += 1
            return False
        self._enqueued += 1
        now = self._clock.now()
        nb = request.not_before
        if nb is not None and nb > now:
            heapq.heappush(self._delayed, (nb, self._new_seq(now), request))
            self._queued += 1
        else:
            self._push(self._host(request.host), request, now)
        self._notify()
        return True

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        n = 0
        for request in requests:
            if await self.enqueue_request(request):
                n += 1
        return n

    # -- lease -------------------------------------------------------------------------------------

    async def next_request(self) -> Lease | None:
        return self._next(self._clock.now())

    def _next(self, now: float) -> Lease | None:
        if self._due(now):
            self._refresh(now)
        ready = self._ready
        hosts = self._hosts
        while ready:
            _, seq, name = heapq.heappop(ready)
            h = hosts.get(name)
            if h is None or h.ready_seq != seq:
                continue  # stale entry
            h.ready_seq = -1
            if not h.queue or h.queue[0][1] != seq or h.in_flight >= h.max_in_flight or h.ready_at > now:
                self._schedule(h, now)
                continue
            req = heapq.heappop(h.queue)[2]
            self._queued -= 1
            h.in_flight += 1
            if h.delay:
                h.ready_at = now + h.delay
            if h.queue:
                self._schedule(h, now)
            token = str(next(self._tokens))
            attempt = self._attempts.get(req.fingerprint, 0) + 1 if self._attempts else 1
            lease = Lease(token, req, now + self.options.lease_timeout, attempt)
            self._leases[token] = (lease, h)
            room = self._room
            if room is not None and not room.done():
                room.set_result(None)
            return lease
        return None

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
        return bool(self._queued or self._leases), self._next_wakeup()

    def _next_wakeup(self) -> float | None:
        times = []
        if self._timers:
            times.append(self._timers[0][0])
        if self._delayed:
            times.append(self._delayed[0][0])
        if self._leases:
            times.append(self._leases[next(iter(self._leases))][0].expires_at)
        return min(times) if times else None

    # -- settle ------------------------------------------------------------------------------------

    def _settle(self, lease: Lease) -> _Host:
        entry = self._leases.pop(lease.token, None)
        if entry is None or entry[0] is not lease and entry[0].token != lease.token:
            raise LeaseError(f"lease {lease.token} for {lease.request.url} is unknown, expired or settled")
        h = entry[1]
        h.in_flight -= 1
        return h

    def _after_settle(self, h: _Host, now: float) -> None:
        if h.queue:
            self._schedule(h, now)
        elif not h.in_flight and h.ready_at <= now:
            del self._hosts[h.name]  # idle host: forget it (its policy lives in _policies)
        self._notify()

    async def ack(self, lease: Lease) -> None:
        h = self._settle(lease)
        self._acked += 1
        if self._attempts:
            self._attempts.pop(lease.request.fingerprint, None)
        self._after_settle(h, self._clock.now())

    async def ack_many(self, leases: Iterable[Lease]) -> None:
        for lease in leases:
            await self.ack(lease)

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        h = self._settle(lease)
        self._retries += 1
        req = lease.request
        self._attempts[req.fingerprint] = lease.attempt
        now = self._clock.now()
        seq = self._new_seq(now)
        if delay > 0:
            heapq.heappush(self._delayed, (now + delay, seq, req))
        else:
            heapq.heappush(h.queue, (-req.priority, seq, req))
        self._queued += 1
        self._after_settle(h, now)

    async def fail(self, lease: Lease, reason: str) -> None:
        h = self._settle(lease)
        self._failures += 1
        self._attempts.pop(lease.request.fingerprint, None)
        self._after_settle(h, self._clock.now())

    # -- politeness --------------------------------------------------------------------------------

    async def block_host(self, host: str, until: float) -> None:
        h = self._host(host)
        if until > h.ready_at:
            h.ready_at = until
        self._schedule(h, self._clock.now())
        self._notify()

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        old = self._policies.get(host, HostPolicy())
        policy = HostPolicy(
            delay=old.delay if delay is None else delay,
            max_in_flight=old.max_in_flight if max_in_flight is None else max_in_flight,
        )
        self._policies[host] = policy
        h = self._hosts.get(host)
        if h is not None:
            h.delay, h.max_in_flight = self._policy(host)
            self._schedule(h, self._clock.now())
        self._notify()

    # -- introspection -----------------------------------------------------------------------------

    async def has_pending_requests(self) -> bool:
        return bool(self._queued or self._leases)

    async def idle(self) -> bool:
        return not self._queued and not self._leases

    async def size(self) -> int:
        return self._queued

    async def stats(self) -> FrontierStats:
        now = self._clock.now()
        depth: dict[str, int] = {}
        oldest_seq: int | None = None
        for name, h in self._hosts.items():
            if h.queue:
                depth[name] = len(h.queue)
                first = min(e[1] for e in h.queue)
                oldest_seq = first if oldest_seq is None else min(oldest_seq, first)
        for _, seq, req in self._delayed:
            depth[req.host] = depth.get(req.host, 0) + 1
            oldest_seq = seq if oldest_seq is None else min(oldest_seq, seq)
        oldest: float | None = None
        if oldest_seq is not None:
            i = bisect.bisect_right(self._seq_marks, (oldest_seq, float("inf"))) - 1
            oldest = self._seq_marks[max(i, 0)][1]
        return FrontierStats(
            queued=self._queued,
            in_flight=len(self._leases),
            duplicates_filtered=self._duplicates,
            enqueued=self._enqueued,
            acked=self._acked,
            retries=self._retries,
            failures=self._failures,
            expired_leases=self._expired,
            oldest_queued_age=None if oldest is None else max(0.0, now - oldest),
            hosts=depth,
        )

    async def close(self) -> None:
        self._closed = True
        self._notify()
