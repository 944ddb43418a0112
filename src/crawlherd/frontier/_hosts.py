"""Per-host scheduling state shared by the in-process index of the ``memory://`` and ``sqlite://``
backends: a host's queue, its politeness, and the step that puts it where it belongs -- the ready heap
(it may be fetched now) or the timer heap (not before ``ready_at``). Entries are lazily deleted: a
heap entry is valid only while it still matches the host (``ready_seq`` / ``timer_at``)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Generic, TypeVar

from crawlherd.frontier.options import FrontierOptions, HostPolicy

__all__ = ["HostSlot", "policy_of", "schedule_host"]

T = TypeVar("T")


class HostSlot(Generic[T]):
    """One host: a heap of ``(-priority, seq, payload)`` (payload: a Request, or a row id), leases out,
    when it may be fetched next, and its policy."""

    __slots__ = ("delay", "in_flight", "max_in_flight", "name", "queue", "ready_at", "ready_seq", "timer_at")

    def __init__(self, name: str, delay: float, max_in_flight: int) -> None:
        self.name = name
        self.queue: list[tuple[int, int, T]] = []
        self.in_flight = 0
        self.ready_at = 0.0
        self.delay = delay
        self.max_in_flight = max_in_flight
        self.ready_seq = -1  # seq of this host's entry in the ready heap, -1 when none
        self.timer_at = -1.0  # time of this host's entry in the timer heap, -1 when none


def policy_of(options: FrontierOptions, policies: Mapping[str, HostPolicy], name: str) -> tuple[float, int]:
    """(delay, max_in_flight) of host ``name``: its overrides, else the frontier's defaults."""
    p = policies.get(name)
    if p is None:
        return options.delay, options.max_in_flight
    return (
        options.delay if p.delay is None else p.delay,
        options.max_in_flight if p.max_in_flight is None else p.max_in_flight,
    )


def schedule_host(
    h: HostSlot[T], now: float, ready: list[tuple[int, int, str]], timers: list[tuple[float, str]]
) -> None:
    """Put ``h`` in ``ready`` if it may be fetched now, in ``timers`` if later; nowhere if it has
    nothing queued or is at its in-flight cap (settling a lease schedules it again)."""
    if not h.queue or h.in_flight >= h.max_in_flight:
        return
    if h.ready_at > now:
        if h.timer_at != h.ready_at:
            h.timer_at = h.ready_at
            heapq.heappush(timers, (h.ready_at, h.name))
        return
    head = h.queue[0]
    if h.ready_seq != head[1]:
        h.ready_seq = head[1]
        heapq.heappush(ready, (head[0], head[1], h.name))
