"""The frontier (scheduler) protocol: a request queue plus a duplicate filter, with leases and
per-host politeness. Every backend (``memory://``, ``sqlite://``, ``redis://``) implements
:class:`Frontier` and passes the same contract suite (``tests/contract/test_frontier_contract.py``).

Semantics every backend keeps:

- **Order**: :meth:`Frontier.next_request` hands out the highest-priority request whose host may be
  fetched now; among equal priorities, the one enqueued first.
- **Duplicates**: a request whose fingerprint was seen is refused (``enqueue_request`` returns False).
  A fingerprint is recorded only when its request is really queued, so a request refused because the
  queue was full can be enqueued later.
- **Politeness**: a host is *ready* when its ``ready_at`` has passed and it has fewer than ``max_in_flight``
  leases out. Handing out a request of a host moves that host's ``ready_at`` to ``now + delay``.
  ``block_host(host, until)`` (Retry-After, backoff) pushes ``ready_at`` later. A request of a host that
  is not ready is never handed out; another host's request is, or None.
- **Leases**: a handed-out request is *leased*, not gone. ``ack`` settles it; ``retry`` puts it back with
  a not-before time; ``fail`` drops it as dead (counted). A lease not settled within ``lease_timeout``
  expires and its request returns to the queue -- sooner when its holder is gone: a frontier shared by
  processes (``redis://``) also ends a lease ``liveness`` seconds after its holder stopped renewing it,
  ``sqlite://`` gives a dead process's leases back when the file is next opened. Settling a lease that
  expired (or was settled) raises :class:`~crawlherd.errors.LeaseError` and changes nothing.
- **Robots first**: ``enqueue_robots(request)`` queues a host's robots.txt request as the host's first
  work (once per host and frontier). While it is queued or leased the host is *robots-pending*: that
  request is handed out before any other of its host, whatever their priorities, and its hand-out counts
  against the host's politeness like any other; nothing else of the host is handed out until its lease
  is settled with ``ack`` or ``fail``. ``retry`` and an expired lease put it back, still first.
- **Bounded size**: ``max_size`` counts queued requests; when full, the policy ``block`` waits for room
  and ``raise`` raises :class:`~crawlherd.errors.QueueFullError`. Nothing is ever dropped silently.

What is in the Protocol is what its users call (the engine, the worker, the Crawlo scheduler, the
``crawlherd frontier`` command): the seed's calls (``enqueue_request``, ``next_request``,
``ack``/``retry``/``fail``, ``has_pending_requests``, ``idle``, ``size``, ``stats``, ``close``), the
batch enqueue the engine and the worker use for a page's links, ``enqueue_robots``, ``wait_next`` and
``async for`` (the README's loop), and the politeness calls. Two calls left it in 0.1.0, being
redundant pairs of calls that stay:

- ``next_requests(n)``: ``next_request()`` called concurrently is already one round trip for all the
  callers on Redis (the lease batcher), and an in-process call elsewhere; no user leased in bulk.
- ``ack_many(leases)``: the same for ``ack()``.

The bundled backends keep both as bulk calls of their own (benchmarks and bulk tools use them; the
contract suite checks them on every backend). :class:`FrontierAdmin` is what a persistent backend
offers its operators (``crawlherd frontier``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from crawlherd.request import Request

__all__ = [
    "EnqueueMany", "Frontier", "FrontierAdmin", "FrontierStats", "FullPolicy", "HostState", "Lease", "enqueue_each",
    "enqueue_many_of",
]

FullPolicy = Literal["block", "raise"]


class Lease(NamedTuple):
    """A request handed out by the frontier, held until it is acked, retried or failed.

    ``token`` identifies the lease to the backend; ``expires_at`` is its deadline (``lease_timeout``), on
    the frontier's clock (a shared frontier ends it sooner when its holder stops renewing it).
    (A NamedTuple: one is built per hand-out, and it is the cheapest immutable record to build.)
    """

    token: str
    request: Request
    expires_at: float
    attempt: int = 1

    @property
    def host(self) -> str:
        return self.request.host


@dataclass(frozen=True, slots=True)
class HostState:
    """One host's politeness as the frontier holds it at the time of :meth:`Frontier.stats`.

    Times are seconds from then (the frontier's clock is not the wall clock): ``ready_in`` until the
    host may be fetched again (0: now, if it is below its cap); ``backoff`` left of a
    :meth:`Frontier.block_host` (Retry-After, a rate-limit back-off; 0: not blocked). ``delay`` is the
    host's minimum delay between fetches (the website's ``min_delay``, raised by robots.txt's
    Crawl-delay) and ``max_in_flight`` its cap (``max_concurrency``)."""

    queued: int
    in_flight: int
    max_in_flight: int
    delay: float
    ready_in: float
    backoff: float = 0.0

    @classmethod
    def from_summary(cls, values: Any) -> HostState | None:
        """A host's state as :meth:`FrontierStats.summary` wrote it (in a heartbeat, perhaps by another
        version): None when a field is missing or not a number; unknown fields are ignored."""
        try:
            found = [values[f.name] for f in fields(cls)]
        except (KeyError, TypeError):
            return None
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in found):
            return None
        return cls(*found)

    @property
    def blocked(self) -> bool:
        """Held by a back-off (Retry-After), not just by its delay."""
        return self.backoff > 0

    @property
    def held(self) -> bool:
        """It has requests queued that may not be fetched now (delay, back-off or cap)."""
        return self.queued > 0 and (self.ready_in > 0 or self.in_flight >= self.max_in_flight)


@dataclass(frozen=True, slots=True)
class FrontierStats:
    """A snapshot of the frontier's counters."""

    queued: int
    in_flight: int
    duplicates_filtered: int
    enqueued: int
    acked: int
    retries: int
    failures: int
    expired_leases: int
    oldest_queued_age: float | None
    hosts: dict[str, int] = field(default_factory=dict)  # host -> queued depth
    dupefilter_unavailable: int = 0  # requests let through unfiltered (policy "allow")
    # every host with something queued, in flight, a delay running or a back-off
    host_states: dict[str, HostState] = field(default_factory=dict)

    @classmethod
    def from_counters(cls, counters: Mapping[str, int], **state: Any) -> FrontierStats:
        """Stats from a backend's lifetime counters (``duplicates``, ``enqueued``, ``acked``, ``retries``,
        ``failures``, ``expired``; a missing one is 0) and its present ``state`` (the other fields)."""
        return cls(
            duplicates_filtered=counters.get("duplicates", 0),
            enqueued=counters.get("enqueued", 0),
            acked=counters.get("acked", 0),
            retries=counters.get("retries", 0),
            failures=counters.get("failures", 0),
            expired_leases=counters.get("expired", 0),
            **state,
        )

    def summary(self, max_hosts: int = 50) -> dict[str, Any]:
        """The JSON-able snapshot a worker's heartbeat carries (the console's Frontier page and
        ``crawlherd explain`` read it): the counts, and the ``max_hosts`` hosts with the most queued
        (blocked hosts first), each with its politeness state."""
        ranked = sorted(self.host_states.items(), key=lambda kv: (not kv[1].blocked, -kv[1].queued, kv[0]))
        return {
            "queued": self.queued,
            "in_flight": self.in_flight,
            "oldest_queued_age": self.oldest_queued_age,
            "hosts": {host: depth for host, depth in sorted(self.hosts.items(), key=lambda kv: -kv[1])[:max_hosts]},
            "host_states": {
                host: {name: getattr(state, name) for name in state.__slots__} for host, state in ranked[:max_hosts]
            },
            "blocked_hosts": sum(1 for s in self.host_states.values() if s.blocked),
        }


@runtime_checkable
class Frontier(Protocol):
    """A frontier backend. Use it as an async context manager; :meth:`close` releases what it opened."""

    async def __aenter__(self) -> Frontier: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def enqueue_request(self, request: Request) -> bool:
        """Queue ``request``. False when it is a duplicate; raises QueueFullError (policy ``raise``)."""
        ...

    async def enqueue_requests(self, requests: Iterable[Request]) -> int:
        """Queue many requests at once (one round trip where the backend allows); returns how many
        were queued (the others were duplicates)."""
        ...

    async def enqueue_robots(self, request: Request) -> bool:
        """Queue ``request`` -- its host's robots.txt -- as the host's first work: the host is
        robots-pending (see the module docstring) until its lease is settled. False, and nothing held,
        when a robots request of this host was queued before. Not refused when the frontier is full
        (``max_size``): it is what lets the host's queued pages go. Counted in ``enqueued``."""
        ...

    async def next_request(self) -> Lease | None:
        """Lease the best request that may be fetched now, or None when nothing is ready."""
        ...

    async def wait_next(self, timeout: float | None = None) -> Lease | None:
        """Wait until a request is ready and lease it. None when the frontier is idle (nothing queued
        nor in flight) or ``timeout`` passed."""
        ...

    def __aiter__(self) -> AsyncIterator[Lease]:
        """Leases as they become ready, until the frontier is idle."""
        ...

    async def ack(self, lease: Lease) -> None:
        """The request is done."""
        ...

    async def retry(self, lease: Lease, delay: float = 0.0) -> None:
        """Put the request back, not to be handed out before ``now + delay``."""
        ...

    async def fail(self, lease: Lease, reason: str) -> None:
        """The request is dead; it is counted, not retried."""
        ...

    async def block_host(self, host: str, until: float) -> None:
        """Hand out nothing of ``host`` before ``until`` (Retry-After, backoff, crawl-delay)."""
        ...

    async def set_host_policy(self, host: str, *, delay: float | None = None, max_in_flight: int | None = None) -> None:
        """Per-host overrides of the minimum delay and in-flight cap."""
        ...

    async def has_pending_requests(self) -> bool:
        """True while anything is queued or in flight."""
        ...

    async def idle(self) -> bool:
        """True when nothing is queued and nothing is in flight."""
        ...

    async def size(self) -> int:
        """Queued requests (not counting in-flight ones)."""
        ...

    async def stats(self) -> FrontierStats:
        """Counters: see :class:`FrontierStats`."""
        ...

    async def close(self) -> None:
        """Release what the backend opened (connections it created, files). Idempotent."""
        ...


@runtime_checkable
class FrontierAdmin(Protocol):
    """What a persistent frontier (``sqlite://``, ``redis://``) offers its operators."""

    async def bad_entries(self) -> dict[str, str]:
        """Entries that could not be read and were moved aside: id -> ``"<reason>\t<entry>"``."""
        ...

    async def purge(self) -> int:
        """Delete everything the frontier keeps (queue, leases, duplicate filter, counters); how many
        requests or keys were deleted. Works on a frontier not entered; stop its workers first."""
        ...


@runtime_checkable
class EnqueueMany(Protocol):
    """A frontier that queues many requests in one call *and* says which it took (``memory://``,
    ``sqlite://``, ``redis://``): what a listing page's detail pages need -- one call, not one per page."""

    async def enqueue_many(self, requests: Sequence[Request]) -> list[bool]:
        """Queue ``requests`` as :meth:`Frontier.enqueue_requests` would; for each, whether it was
        queued (False: a duplicate, of an earlier request or of one of the list)."""
        ...


def enqueue_many_of(frontier: object) -> Callable[[Sequence[Request]], Awaitable[list[bool]]] | None:
    """``frontier.enqueue_many`` when it has one (:class:`EnqueueMany`), else None: what
    ``isinstance(frontier, EnqueueMany)`` tells, without a runtime protocol check's cost (several
    microseconds; ``Crawler.arun`` asks it for every page)."""
    many = getattr(frontier, "enqueue_many", None)
    return many if callable(many) else None


async def enqueue_each(frontier: Frontier, requests: Sequence[Request]) -> list[bool | BaseException]:
    """For each of ``requests``, whether ``frontier`` queued it, or the error that stopped it: one
    :meth:`EnqueueMany.enqueue_many` where the backend has it (its failure is every request's: which
    were queued is not known), else one :meth:`Frontier.enqueue_request` per request, at once (a
    backend that can shares their round trips), a request repeated in the list after the others."""
    if not requests:
        return []
    many = enqueue_many_of(frontier)
    if many is not None:
        try:
            return [*await many(requests)]
        except Exception as exc:
            return [exc] * len(requests)
    # a request repeated in the batch goes after the others: the first of equals is the one queued, as
    # one enqueue_many says, whatever order a backend's shared round trips keep
    seen: set[bytes] = set()
    first: list[bool] = []
    for request in requests:
        first.append(request.fingerprint not in seen)
        seen.add(request.fingerprint)
    results: list[bool | BaseException] = [False] * len(requests)
    for wave in (True, False):
        picked = [i for i, f in enumerate(first) if f is wave]
        got = await asyncio.gather(*(frontier.enqueue_request(requests[i]) for i in picked), return_exceptions=True)
        for i, result in zip(picked, got, strict=True):
            results[i] = result
    return results
