"""The send gate: per-host spacing kept at the moment requests *leave*.

Every fetcher has a ``send_gate`` attribute (declared in :class:`~crawlherd.fetch.base.Fetcher`): a
:data:`SendGate` it calls with the politeness key of the host (``host[:port]``, as the frontier spells
it) right before a request -- every redirect hop too -- is sent, and awaits what it returns. The
:class:`~crawlherd.crawler.Crawler` sets it to a :class:`HostGate`.

Why at send time: the frontier and the rate limiter decide when a request may *go*, but a request let
go on time may leave later (a busy worker, a new connection, a robots.txt fetch first), and the server
must still never see two requests to one host closer than the delay.

Across processes: a :class:`HostGate` given a shared :class:`SendStamps` (:meth:`HostGate.share`; a
crawl over a Redis frontier and the worker share their ``RedisFrontier``) also asks it, right before
each send, for the request's slot: the first time when the host's delay has passed since the last
request *any* process sent there, or since that request's answer when it came later, and no other
process's request to the host is still unanswered (for the delay plus ``SEND_HOLD``, 1 s, at most: a
cancelled request, a process gone). The store takes the slot atomically, on its shared clock, and the
request leaves at it without asking again; the gate reports each answer (:meth:`HostGate.answered`).
Spacing from the answer is what makes the delay exact at the server without a margin: the server saw
a request before it answered it, whatever delayed the request between its slot and the wire (the
event loop of a busy process, the socket write).
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import SendVetoedError
from crawlherd.url import canonicalize_url, host_of

__all__ = ["SEND_VETO", "HostGate", "SendGate", "SendStamps", "SlotLimiter", "check_veto", "hop_host", "pass_gate"]

#: Called with the host (``host[:port]``) right before a request is written; returns None to send at
#: once (the common, allocation-free case), or an awaitable to wait on first.
SendGate = Callable[[str], Awaitable[None] | None]

#: Set (for the task that fetches, and what it awaits) by a caller whose reason to send may lapse while
#: the request waits at its gate -- the worker's session pool: the session's proxy rested by a block
#: page another request met meanwhile. Every fetcher calls it once its gate let the request go, right
#: before sending (:func:`check_veto`); a reason stops the request with SendVetoedError.
SEND_VETO: contextvars.ContextVar[Callable[[], str | None] | None] = contextvars.ContextVar(
    "crawlherd_send_veto", default=None
)


def check_veto(url: object) -> None:
    """Raise SendVetoedError when :data:`SEND_VETO` says the request to ``url`` (a str, or a URL object
    made one only then: this runs for every request) must not be sent now."""
    veto = SEND_VETO.get()
    if veto is not None and (why := veto()) is not None:
        raise SendVetoedError(f"{url}: not sent: {why}", url=str(url))

_FORGET_AFTER = 50_000  # hosts remembered before those whose spacing has passed are dropped


@runtime_checkable
class SendStamps(Protocol):
    """A send clock shared by processes (``RedisFrontier``): the host's delay and holds are its own.
    ``owner`` names the asking gate (one per :class:`HostGate`)."""

    async def stamp_send(self, host: str, owner: str) -> tuple[float, bool]:
        """``(seconds, go)``: with ``go``, ``owner``'s request to ``host`` has its slot (recorded) and
        leaves once these seconds have passed; else ask again after them."""
        ...

    def stamp_answer(self, host: str, owner: str) -> None:
        """``owner``'s request to ``host`` (given its slot by :meth:`stamp_send`) was answered, failed,
        or will not be sent: the host's delay runs from now at the latest, and the host is no longer
        held for it. Returns at once (recorded in the background)."""
        ...


class SlotLimiter(Protocol):
    """What the gate needs of a rate limiter (:class:`~crawlherd.crawler.concurrency.rate_limiter.RateLimiter`)."""

    def reserve(self, domain: str) -> float:
        """Take ``domain``'s next slot: the seconds to wait for it (0: now)."""
        ...

    def spaced(self, domain: str) -> bool:
        """True when sends to ``domain`` must be spaced (then :meth:`claim` is called)."""
        ...

    def claim(self, domain: str) -> float:
        """Right before sending: 0.0 means go (and records the send), else the seconds still to wait."""
        ...


def hop_host(url: str) -> str:
    """The politeness key (``host[:port]``) of a redirect hop's URL, as ``Request.host`` spells it."""
    return host_of(canonicalize_url(url))


async def pass_gate(gate: SendGate | None, host: str) -> None:
    """Wait until ``gate`` lets a request to ``host`` leave (at once without a gate)."""
    if gate is not None:
        wait = gate(host)
        if wait is not None:
            await wait


class HostGate:
    """A :data:`SendGate` that keeps, per host, the spacing of

    - the running crawls' ``delay`` (:meth:`hold` / :meth:`release`; the largest one holds),
    - a per-host delay (robots.txt ``Crawl-delay``: :meth:`set_host_delay`), over the crawl's,
    - the slots of the rate limiters of the running streams (:meth:`add_limiter`): a slot is taken
      here, once per request sent.

    The spacing runs from the moment a request leaves (taken here) and, once the crawler reports its
    answer (:meth:`answered`), from that moment too: what the server sees is never closer than the delay.

    ``HostGate(*, clock=None)``. Idle hosts are forgotten once more than 50 000 are remembered.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.delay = 0.0
        self._delays: list[float] = []
        self._host_delay: dict[str, float] = {}
        self._host_next: dict[str, float] = {}
        self._limiters: list[SlotLimiter] = []
        self._shared: SendStamps | None = None
        self._owner = secrets.token_hex(6)  # this gate, to the shared store

    @property
    def delays(self) -> tuple[float, ...]:
        """The delays of the crawls running (held and not yet released)."""
        return tuple(self._delays)

    def hold(self, delay: float) -> None:
        """A crawl with this per-host ``delay`` starts."""
        self._delays.append(delay)
        self.delay = max(self._delays)

    def release(self, delay: float) -> None:
        """A crawl that :meth:`hold` its ``delay`` ended."""
        self._delays.remove(delay)
        self.delay = max(self._delays, default=0.0)

    def set_host_delay(self, host: str, delay: float) -> None:
        """``host``'s own spacing (robots.txt ``Crawl-delay``), used instead of the crawl's."""
        self._host_delay[host] = delay

    @property
    def shared(self) -> SendStamps | None:
        """The send clock shared with other processes (:meth:`share`), if any."""
        return self._shared

    def share(self, stamps: SendStamps | None) -> None:
        """Also keep the spacing (and holds) of ``stamps`` -- every process sharing it -- at each send
        (None: this process's spacing only)."""
        self._shared = stamps

    def answered(self, host: str) -> None:
        """A request to ``host`` came back (answered, or failed): the host's spacing also runs from now.
        The server saw the request before it answered, so the next one cannot reach it closer than the
        delay, whatever a connection set-up or the network delayed between the gate and the wire."""
        if self._shared is not None:
            self._shared.stamp_answer(host, self._owner)
        if not (self.delay or self._host_delay):
            return
        delay = self._host_delay.get(host, self.delay)
        if delay:
            at = self.clock.now() + delay
            if at > self._host_next.get(host, 0.0):
                self._host_next[host] = at

    def add_limiter(self, limiter: SlotLimiter) -> None:
        """Take ``limiter``'s slots at send time until :meth:`remove_limiter`."""
        self._limiters.append(limiter)

    def remove_limiter(self, limiter: SlotLimiter) -> None:
        self._limiters.remove(limiter)

    def __call__(self, host: str) -> Awaitable[None] | None:
        wait = 0.0
        claim = False
        for rl in self._limiters:
            w = rl.reserve(host)  # the rate limiter's slot is taken here, once per request sent
            if w > wait:
                wait = w
            if not claim and rl.spaced(host):
                claim = True
        delay = self._host_delay.get(host, self.delay) if (self.delay or self._host_delay) else 0.0
        if self._shared is not None:
            return self._space_shared(self._shared, host, delay, wait, claim)
        if not delay and not claim:
            return self.clock.sleep(wait) if wait > 0 else None
        return self._space(host, delay, wait, claim)

    async def _space_shared(self, shared: SendStamps, host: str, delay: float, wait: float, claim: bool) -> None:
        """This process's spacing, then the shared one: asked last, right before the send."""
        if delay or claim:
            await self._space(host, delay, wait, claim)
        elif wait > 0:
            await self.clock.sleep(wait)
        go = False
        while not go:
            wait, go = await shared.stamp_send(host, self._owner)
            if wait > 0:
                try:
                    await self._sleep_until(self.clock.now() + wait)
                except asyncio.CancelledError:
                    if go:  # its slot is taken but it will not leave: the host is not held for it
                        shared.stamp_answer(host, self._owner)
                    raise
        if delay:  # this process's spacing runs from now (the shared clock may have held it longer)
            self._host_next[host] = max(self._host_next.get(host, 0.0), self.clock.now() + delay)

    async def _sleep_until(self, until: float) -> None:
        """Until the clock reads ``until``: a slot is a lower bound, and an event loop's timer may fire a
        little early (uvloop counts whole milliseconds)."""
        clock = self.clock
        while (left := until - clock.now()) > 0:
            await clock.sleep(left)

    async def _space(self, host: str, delay: float, wait: float, claim: bool) -> None:
        clock = self.clock
        if wait > 0:
            await clock.sleep(wait)
        if claim:
            for rl in self._limiters:
                while (w := rl.claim(host)) > 0:
                    await clock.sleep(w)
        if not delay:
            return
        host_next = self._host_next
        while True:
            now = clock.now()
            ready = host_next.get(host, 0.0)
            if ready <= now:
                if len(host_next) > _FORGET_AFTER:  # forget hosts whose spacing has passed
                    for name in [h for h, t in host_next.items() if t <= now]:
                        del host_next[name]
                host_next[host] = now + delay
                return
            await clock.sleep(ready - now)
