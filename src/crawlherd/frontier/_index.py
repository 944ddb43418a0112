"""The host-aware heap index of the in-process frontiers (``memory://`` and ``sqlite://``), generic over
what it stores: the memory backend keeps :class:`~crawlherd.request.Request` objects in it, the SQLite
backend the row ids of its ``requests`` table (the store reads the record back when it leases one).

The index decides what may be handed out next and keeps nothing else (no duplicate filter, no
counters, no records). Data structures, all O(log n) per operation:

- per host (:class:`HostSlot`), a heap of ``(-priority, seq, payload)``; ``seq`` is global and
  increasing, so equal priorities are FIFO;
- ``ready``: a heap of ``(-priority, seq, host)`` holding the head of every host that may be fetched
  now; an entry is valid only while it is still that host's head (``HostSlot.ready_seq``) -- lazy
  deletion, so nothing is ever searched for in a heap;
- ``timers``: ``(ready_at, host)`` for hosts with work that wait for their politeness delay, valid
  while ``HostSlot.timer_at`` still says so;
- ``delayed``: ``(not_before, seq, host, priority, payload)`` for requests waiting for a time;
- ``leases``: token -> :class:`Held`, an ordered dict; every lease has the same timeout, so expiry
  order is insertion order;
- per host, a *robots-pending* state (``HostSlot.pending``, ``HostSlot.robots``): a host whose robots.txt
  request was queued with :meth:`HostIndex.add_robots` hands out that request first, whatever the
  priorities, and nothing else until its lease is settled (ack or fail); a retry or an expired lease
  puts it back, still first.

A host is forgotten when it has nothing queued, nothing in flight and no ready time ahead; its policy
overrides live in ``policies`` and outlive it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Mapping
from typing import Generic, TypeVar

from crawlherd.frontier.base import HostState
from crawlherd.frontier.options import FrontierOptions, HostPolicy

__all__ = ["Held", "HostIndex", "HostSlot"]

T = TypeVar("T")

_MARK_EVERY = 1.0  # seconds between two (seq, time) marks; the precision of oldest_queued_time()


class HostSlot(Generic[T]):
    """One host: a heap of ``(-priority, seq, payload)``, leases out, when it may be fetched next, and
    its policy."""

    __slots__ = (
        "blocked_until", "delay", "in_flight", "max_in_flight", "name", "pending", "queue", "ready_at", "ready_seq",
        "robots", "timer_at",
    )

    def __init__(self, name: str, delay: float, max_in_flight: int, ready_at: float = 0.0) -> None:
        self.name = name
        self.queue: list[tuple[int, int, T]] = []
        self.in_flight = 0
        self.ready_at = ready_at
        self.delay = delay
        self.max_in_flight = max_in_flight
        self.ready_seq = -1  # seq of this host's entry in the ready heap, -1 when none
        self.timer_at = -1.0  # time of this host's entry in the timer heap, -1 when none
        self.blocked_until = 0.0  # the latest block() (Retry-After, back-off), for stats only
        self.pending = False  # robots-pending: only ``robots`` may be handed out, until its lease is settled
        self.robots: tuple[int, int, T] | None = None  # the queued robots request, as a queue entry


class Held(Generic[T]):
    """A payload leased out: its host, priority, when the lease expires, and whether it is its host's
    robots request."""

    __slots__ = ("expires_at", "host", "payload", "priority", "robots")

    def __init__(self, payload: T, host: HostSlot[T], priority: int, expires_at: float, robots: bool = False) -> None:
        self.payload = payload
        self.host = host
        self.priority = priority
        self.expires_at = expires_at
        self.robots = robots


class HostIndex(Generic[T]):
    """See the module docstring. ``first_seq``: the first sequence number to hand out (a store that
    reloads its index starts above every number it used); ``ready_at``: host ready times a store kept
    (they apply when the host is next seen)."""

    def __init__(
        self,
        options: FrontierOptions,
        policies: Mapping[str, HostPolicy] = {},  # noqa: B006 - read only
        *,
        first_seq: int = 0,
        ready_at: Mapping[str, float] | None = None,
    ) -> None:
        self.options = options
        self.policies: dict[str, HostPolicy] = dict(policies)
        self.hosts: dict[str, HostSlot[T]] = {}
        self.ready: list[tuple[int, int, str]] = []
        self.timers: list[tuple[float, str]] = []
        self.delayed: list[tuple[float, int, str, int, T]] = []
        self.leases: OrderedDict[str, Held[T]] = OrderedDict()
        self.queued = 0  # in host queues + delayed
        self._kept_ready_at: dict[str, float] = dict(ready_at or {})
        self._seq = itertools.count(first_seq)
        self._seq_marks: list[tuple[int, float]] = []
        self._last_mark = float("-inf")

    # -- hosts -------------------------------------------------------------------------------------

    def policy(self, name: str) -> tuple[float, int]:
        """(delay, max_in_flight) of host ``name``: its overrides, else the frontier's defaults."""
        opts = self.options
        p = self.policies.get(name)
        if p is None:
            return opts.delay, opts.max_in_flight
        return (
            opts.delay if p.delay is None else p.delay,
            opts.max_in_flight if p.max_in_flight is None else p.max_in_flight,
        )

    def host(self, name: str) -> HostSlot[T]:
        """Host ``name``'s slot, made when it is first seen."""
        h = self.hosts.get(name)
        if h is None:
            h = self.hosts[name] = HostSlot(name, *self.policy(name), self._kept_ready_at.pop(name, 0.0))
        return h

    def schedule(self, h: HostSlot[T], now: float) -> None:
        """Put ``h`` in ``ready`` if it may be fetched now, in ``timers`` if later; nowhere if it has
        nothing queued or is at its in-flight cap (settling a lease schedules it again). A robots-pending
        host is scheduled by its robots request alone (nowhere while that is leased)."""
        if h.pending:
            head = h.robots
            if head is None:
                return
        elif h.queue:
            head = h.queue[0]
        else:
            return
        if h.in_flight >= h.max_in_flight:
            return
        if h.ready_at > now:
            if h.timer_at != h.ready_at:
                h.timer_at = h.ready_at
                heapq.heappush(self.timers, (h.ready_at, h.name))
            return
        if h.ready_seq != head[1]:
            h.ready_seq = head[1]
            heapq.heappush(self.ready, (head[0], head[1], h.name))

    def block(self, name: str, until: float, now: float) -> None:
        """Host ``name`` is not fetched before ``until`` (a later time already set stays)."""
        h = self.host(name)
        if until > h.ready_at:
            h.ready_at = until
        if until > h.blocked_until:
            h.blocked_until = until
        self.schedule(h, now)

    def set_policy(self, name: str, policy: HostPolicy, now: float) -> None:
        """Host ``name``'s overrides are now ``policy`` (see :meth:`HostPolicy.updated`)."""
        self.policies[name] = policy
        h = self.hosts.get(name)
        if h is not None:
            h.delay, h.max_in_flight = self.policy(name)
            self.schedule(h, now)

    # -- queue -------------------------------------------------------------------------------------

    def next_seq(self, now: float) -> int:
        """The next sequence number; every second or so it is recorded with the time, which is how
        :meth:`oldest_queued_time` is known without storing a time per request."""
        seq = next(self._seq)
        if now - self._last_mark >= _MARK_EVERY:
            self._seq_marks.append((seq, now))
            self._last_mark = now
        return seq

    def add(self, payload: T, host: str, priority: int, seq: int, not_before: float | None, now: float) -> None:
        """Queue ``payload`` for ``host``; it waits in ``delayed`` while ``not_before`` is ahead."""
        self.queued += 1
        if not_before is not None and not_before > now:
            heapq.heappush(self.delayed, (not_before, seq, host, priority, payload))
            return
        h = self.hosts.get(host)
        if h is None:
            h = self.host(host)
        heapq.heappush(h.queue, (-priority, seq, payload))
        self.schedule(h, now)

    def add_robots(self, payload: T, host: str, priority: int, seq: int, now: float) -> None:
        """Queue ``payload`` as ``host``'s robots request: the host is robots-pending until its lease is
        settled (see the module docstring)."""
        self.queued += 1
        h = self.host(host)
        h.pending = True
        h.robots = (-priority, seq, payload)
        self.schedule(h, now)

    def sort(self, now: float) -> None:
        """After :meth:`load` calls: heapify every host queue and schedule every host."""
        for h in self.hosts.values():
            heapq.heapify(h.queue)
            self.schedule(h, now)

    def load(self, payload: T, host: str, priority: int, seq: int, not_before: float | None, now: float) -> None:
        """Like :meth:`add`, for a bulk load followed by one :meth:`sort`."""
        self.queued += 1
        if not_before is not None and not_before > now:
            heapq.heappush(self.delayed, (not_before, seq, host, priority, payload))
        else:
            self.host(host).queue.append((-priority, seq, payload))

    def due(self, now: float) -> bool:
        """Is a timer, a delayed request or a lease expiry due (then call :meth:`refresh`)?"""
        if self.timers and self.timers[0][0] <= now:
            return True
        if self.delayed and self.delayed[0][0] <= now:
            return True
        if self.leases:
            return self.leases[next(iter(self.leases))].expires_at <= now
        return False

    def refresh(self, now: float) -> list[tuple[Held[T], int]]:
        """Bring due timers, delayed requests and expired leases back into play; returns the expired
        leases, each with the sequence number its payload was queued again under."""
        leases = self.leases
        expired: list[tuple[Held[T], int]] = []
        while leases:
            token = next(iter(leases))
            held = leases[token]
            if held.expires_at > now:
                break
            del leases[token]
            h = held.host
            h.in_flight -= 1
            seq = self.next_seq(now)
            if held.robots:
                h.robots = (-held.priority, seq, held.payload)
            else:
                heapq.heappush(h.queue, (-held.priority, seq, held.payload))
            self.queued += 1
            self.schedule(h, now)
            expired.append((held, seq))
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            _, seq, host, priority, payload = heapq.heappop(delayed)
            h = self.host(host)
            heapq.heappush(h.queue, (-priority, seq, payload))
            self.schedule(h, now)
        timers = self.timers
        hosts = self.hosts
        while timers and timers[0][0] <= now:
            at, name = heapq.heappop(timers)
            timed = hosts.get(name)
            if timed is not None and timed.timer_at == at:
                timed.timer_at = -1.0
                self.schedule(timed, now)
        return expired

    # -- lease and settle --------------------------------------------------------------------------

    def pop(self, now: float) -> tuple[HostSlot[T], int, T, bool] | None:
        """The highest-priority payload whose host may be fetched now, as (host, priority, payload,
        robots: it is the host's robots request), counted in flight and its host's delay started; None
        when there is none. Pass it to :meth:`hold` (or to :meth:`release` if the store cannot lease it)."""
        ready = self.ready
        hosts = self.hosts
        while ready:
            _, seq, name = heapq.heappop(ready)
            h = hosts.get(name)
            if h is None or h.ready_seq != seq:
                continue  # stale entry
            h.ready_seq = -1
            head = h.robots if h.pending else h.queue[0] if h.queue else None
            if head is None or head[1] != seq or h.in_flight >= h.max_in_flight or h.ready_at > now:
                self.schedule(h, now)
                continue
            if h.pending:
                h.robots = None  # out on lease: the host stays pending, nothing else of it goes
            else:
                heapq.heappop(h.queue)
            negprio, _, payload = head
            self.queued -= 1
            h.in_flight += 1
            if h.delay:
                h.ready_at = now + h.delay
            if h.queue and not h.pending:
                self.schedule(h, now)
            return h, -negprio, payload, h.pending
        return None

    def hold(self, token: str, held: Held[T]) -> None:
        """Record a lease of a payload :meth:`pop` handed out."""
        self.leases[token] = held

    def take(self, token: str) -> Held[T] | None:
        """The lease ``token`` settled (no longer in flight), or None when it is unknown. Then call
        :meth:`settled` (or :meth:`requeue`) for its host."""
        held = self.leases.pop(token, None)
        if held is not None:
            held.host.in_flight -= 1
        return held

    def release(self, h: HostSlot[T], now: float, robots: bool = False) -> None:
        """A payload :meth:`pop` handed out is not leased after all (the store dropped it)."""
        h.in_flight -= 1
        self.settled(h, now, robots)

    def settled(self, h: HostSlot[T], now: float, robots: bool = False) -> None:
        """After a lease of ``h`` was settled (``robots``: its robots request, which ends the host's
        robots-pending state): schedule it, or forget it when it is idle."""
        if robots:
            h.pending = False
        if h.queue or h.pending:
            self.schedule(h, now)
        elif not h.in_flight and h.ready_at <= now and self.hosts.get(h.name) is h:
            del self.hosts[h.name]

    def requeue(self, held: Held[T], seq: int, now: float, delay: float) -> None:
        """Queue a payload :meth:`take` settled again under ``seq``, after ``delay`` seconds if > 0 (a
        robots request goes back first in its host, which is blocked for the delay: nothing else of a
        robots-pending host may go meanwhile anyway)."""
        h = held.host
        if held.robots:
            h.robots = (-held.priority, seq, held.payload)
            if now + delay > h.ready_at:
                h.ready_at = now + delay
        elif delay > 0:
            heapq.heappush(self.delayed, (now + delay, seq, h.name, held.priority, held.payload))
        else:
            heapq.heappush(h.queue, (-held.priority, seq, held.payload))
        self.queued += 1
        self.settled(h, now)

    # -- introspection -----------------------------------------------------------------------------

    def busy(self) -> bool:
        """Anything queued or in flight."""
        return bool(self.queued or self.leases)

    def next_wakeup(self) -> float | None:
        """When the next timer, delayed request or lease expiry falls due; None when nothing will."""
        times = []
        if self.timers:
            times.append(self.timers[0][0])
        if self.delayed:
            times.append(self.delayed[0][0])
        if self.leases:
            times.append(self.leases[next(iter(self.leases))].expires_at)
        return min(times) if times else None

    def depth(self) -> dict[str, int]:
        """Queued payloads (delayed ones too) per host."""
        depth = {
            name: len(h.queue) + (h.robots is not None) for name, h in self.hosts.items() if h.queue or h.robots
        }
        for _, _, host, _, _ in self.delayed:
            depth[host] = depth.get(host, 0) + 1
        return depth

    def states(self, now: float) -> dict[str, HostState]:
        """The politeness state of every host with something queued, in flight or a ready time ahead."""
        depth = self.depth()
        out: dict[str, HostState] = {}
        for name in depth.keys() | self.hosts.keys():
            h = self.hosts.get(name)
            if h is None:  # only delayed requests: the host slot is made when they fall due
                delay, cap = self.policy(name)
                in_flight, ready_at, blocked = 0, self._kept_ready_at.get(name, 0.0), 0.0
            else:
                delay, cap, in_flight = h.delay, h.max_in_flight, h.in_flight
                ready_at, blocked = h.ready_at, h.blocked_until
            queued = depth.get(name, 0)
            if queued or in_flight or ready_at > now:
                out[name] = HostState(queued, in_flight, cap, delay, max(0.0, ready_at - now), max(0.0, blocked - now))
        return out

    def oldest_queued_time(self) -> float | None:
        """About when the oldest payload still queued was queued (within a second); None when empty."""
        oldest: int | None = None
        for h in self.hosts.values():
            seqs = [e[1] for e in h.queue]
            if h.robots is not None:
                seqs.append(h.robots[1])
            if seqs:
                first = min(seqs)
                oldest = first if oldest is None else min(oldest, first)
        for _, seq, _, _, _ in self.delayed:
            oldest = seq if oldest is None else min(oldest, seq)
        if oldest is None or not self._seq_marks:
            return None
        i = bisect.bisect_right(self._seq_marks, (oldest, float("inf"))) - 1
        return self._seq_marks[max(i, 0)][1]
