"""``RateLimiter``: per-domain spacing and back-off.

Every domain has a *next slot* time. :meth:`RateLimiter.reserve` hands the caller the next slot and
moves it on by the domain's current delay in the same step (no ``await`` in between), so however many
tasks wait on one domain they are spaced by the delay: no burst. A rate-limit answer (429/503 by
default) raises the domain's delay -- to ``Retry-After`` when the server sent one (seconds or an
HTTP date), else exponentially (``delay * 2``, with jitter) -- capped at ``max_delay``; each success
decays it back towards ``base_delay``. The dispatcher re-fetches a rate-limited URL up to
``max_retries`` times before its result is reported as failed, with the reason.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from crawlherd import metrics
from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import ConfigurationError, InvalidURLError
from crawlherd.url import canonicalize

__all__ = ["RateLimitDecision", "RateLimiter", "parse_retry_after"]


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds or an HTTP date (None when absent
    or unreadable; a date in the past means 0)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def _domain_of(url: str) -> str:
    """The key a URL's politeness is kept under: ``host[:port]``, as ``Request.host`` spells it."""
    try:
        return canonicalize(url)[1]
    except InvalidURLError:
        return (urlsplit(url).hostname or url).lower()


@dataclass(frozen=True, slots=True)
class RateLimitDecision:
    """What to do with a rate-limited response: ``retry`` after ``delay`` seconds, or give up
    (``retry`` False) for ``reason``."""

    retry: bool
    delay: float
    reason: str


class _Domain:
    __slots__ = ("delay", "fails", "last_sent", "next_at")

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.next_at = 0.0
        self.last_sent = -1e18
        self.fails = 0


class RateLimiter:
    """Per-domain rate limiting: ``RateLimiter(base_delay=(1.0, 3.0), max_delay=60, max_retries=3,
    rate_limit_codes=(429, 503), *, clock=None, decay=0.75, jitter=0.25, rng=None)``.

    ``base_delay``: the spacing between two requests to one domain, drawn uniformly from the range
    for each request. ``max_delay``: the largest back-off; a ``Retry-After`` longer than this makes
    the URL fail at once (we will not come back earlier than the server asked). ``decay``: the factor
    a success applies to a raised delay. ``jitter``: back-off is multiplied by ``1 ± jitter``.
    """

    def __init__(
        self,
        base_delay: tuple[float, float] = (1.0, 3.0),
        max_delay: float = 60.0,
        max_retries: int = 3,
        rate_limit_codes: tuple[int, ...] = (429, 503),
        *,
        clock: Clock | None = None,
        decay: float = 0.75,
        jitter: float = 0.25,
        rng: random.Random | None = None,
        backoff_base: float = 0.5,
        max_domains: int = 100_000,
    ) -> None:
        lo, hi = base_delay
        if not 0 <= lo <= hi:
            raise ConfigurationError(f"RateLimiter base_delay={base_delay!r}: need 0 <= low <= high seconds")
        if max_delay < hi:
            raise ConfigurationError(f"RateLimiter max_delay={max_delay!r}: must be >= base_delay's high {hi}")
        if max_retries < 0:
            raise ConfigurationError(f"RateLimiter max_retries={max_retries!r}: must be >= 0")
        if not 0 < decay <= 1:
            raise ConfigurationError(f"RateLimiter decay={decay!r}: must be in (0, 1]")
        if backoff_base <= 0:
            raise ConfigurationError(f"RateLimiter backoff_base={backoff_base!r}: must be > 0 seconds")
        if not 0 <= jitter < 1:
            raise ConfigurationError(f"RateLimiter jitter={jitter!r}: must be in [0, 1)")
        self.base_delay = (float(lo), float(hi))
        self.max_delay = float(max_delay)
        self.max_retries = max_retries
        self.rate_limit_codes = frozenset(rate_limit_codes)
        self.clock: Clock = clock or SystemClock()
        self._decay = decay
        self._jitter = jitter
        self._backoff_base = backoff_base
        self._rng = rng or random.Random()
        self._max_domains = max_domains
        self._domains: dict[str, _Domain] = {}
        self._zero = hi == 0.0

    def __repr__(self) -> str:
        return (
            f"RateLimiter(base_delay={self.base_delay}, max_delay={self.max_delay}, "
            f"max_retries={self.max_retries}, rate_limit_codes={tuple(sorted(self.rate_limit_codes))})"
        )

    def _base(self) -> float:
        lo, hi = self.base_delay
        return lo if lo == hi else self._rng.uniform(lo, hi)

    def _domain(self, domain: str) -> _Domain:
        d = self._domains.get(domain)
        if d is None:
            if len(self._domains) >= self._max_domains:
                self._gc()
            d = self._domains[domain] = _Domain(self._base())
        return d

    def _gc(self) -> None:
        """Forget domains whose slot has passed and that are not backing off (their state is default)."""
        now = self.clock.now()
        for name in [n for n, d in self._domains.items() if d.next_at <= now and not d.fails]:
            del self._domains[name]

    def reserve(self, domain: str) -> float:
        """Take the next slot of ``domain``; returns the seconds to wait before fetching (0: now)."""
        d = self._domains.get(domain)
        if self._zero:
            if d is None:
                return 0.0  # no spacing and never rate limited: nothing to remember
            if d.next_at == 0.0 and d.delay <= 0.0:
                return 0.0
        if d is None:
            d = self._domain(domain)
        raised = d.delay > self.base_delay[1]
        if self._zero and not raised:
            # No spacing configured: only a back-off window that is still open makes anyone wait.
            if d.next_at == 0.0:
                return 0.0
            now = self.clock.now()
            if d.next_at <= now:
                d.next_at = 0.0
                return 0.0
            return d.next_at - now
        now = self.clock.now()
        slot = d.next_at if d.next_at > now else now
        d.next_at = slot + (d.delay if raised else self._base())
        return slot - now

    async def wait_if_needed(self, url: str) -> None:
        """crawl4ai's call: wait until ``url``'s domain may be fetched again, and take that slot. The
        dispatchers call :meth:`reserve`/:meth:`claim` themselves; this is for a dispatcher of your own."""
        await self.take_slot(_domain_of(url), self.clock)

    async def take_slot(self, domain: str, clock: Clock) -> None:
        """Wait on ``clock`` until ``domain`` may be fetched again, and take that slot: :meth:`reserve`,
        then, for a spaced domain, :meth:`claim` until it is granted."""
        wait = self.reserve(domain)
        if wait > 0:
            await clock.sleep(wait)
        if self.spaced(domain):
            while (wait := self.claim(domain)) > 0:
                await clock.sleep(wait)

    async def update_delay(self, url: str, status_code: int, retry_after: str | None = None) -> bool:
        """crawl4ai's call after each answer: a rate-limit code (``rate_limit_codes``) raises the
        domain's delay (to ``retry_after`` when given, a ``Retry-After`` header value) and returns
        whether to re-fetch (False once ``max_retries`` were used up for this domain in a row); any
        other code decays the delay and returns True."""
        domain = _domain_of(url)
        if status_code not in self.rate_limit_codes:
            self.on_success(domain)
            return True
        d = self._domain(domain)
        decision = self.on_rate_limited(domain, status_code, parse_retry_after(retry_after, self.clock.now()), d.fails)
        return decision.retry

    def spaced(self, domain: str) -> bool:
        """True when requests to ``domain`` must be spaced (a base delay, or a raised one)."""
        if not self._zero:
            return True
        d = self._domains.get(domain)
        return d is not None and d.delay > self.base_delay[1]

    def claim(self, domain: str) -> float:
        """Call when the reserved slot has come, right before sending: 0.0 means go (and records the
        send), else the seconds still to wait before calling again. A waiter woken late by a busy
        event loop sends late; the ones after it then wait too, so the *actual* sends stay at least
        the minimum delay apart, not only the reserved slots."""
        d = self._domains.get(domain)
        if d is None:
            d = self._domain(domain)
        spacing = d.delay if d.delay > self.base_delay[1] else self.base_delay[0]
        now = self.clock.now()
        ready = d.last_sent + spacing
        if ready > now:
            return ready - now
        d.last_sent = now
        return 0.0

    def delay_of(self, domain: str) -> float:
        """The current delay of ``domain`` (its base delay until a rate-limit answer raised it)."""
        d = self._domains.get(domain)
        return self.base_delay[0] if d is None else d.delay

    def on_success(self, domain: str) -> None:
        """A non-rate-limited answer: decay a raised delay back towards the base."""
        d = self._domains.get(domain)
        if d is None:
            return
        d.fails = 0
        hi = self.base_delay[1]
        if d.delay > hi:
            d.delay *= self._decay
            if d.delay <= hi + 0.05:
                d.delay = self._base()

    def on_rate_limited(self, domain: str, status: int, retry_after: float | None, attempt: int) -> RateLimitDecision:
        """A rate-limit answer to the ``attempt``-th re-fetch (0: the first fetch). Raises the
        domain's delay and says whether to re-fetch, after how long, or why not."""
        d = self._domain(domain)
        d.fails += 1
        metrics.BACKOFFS.inc()
        now = self.clock.now()
        if retry_after is not None:
            if retry_after > self.max_delay:
                return RateLimitDecision(
                    False,
                    retry_after,
                    f"HTTP {status}: Retry-After {retry_after:.0f} s is longer than max_delay={self.max_delay:g} s",
                )
            delay = max(retry_after, self.base_delay[0])
        else:
            grown = max(d.delay, self.base_delay[1], self._backoff_base) * 2
            delay = min(self.max_delay, grown * self._rng.uniform(1 - self._jitter, 1 + self._jitter))
        d.delay = delay
        if d.next_at < now + delay:
            d.next_at = now + delay
        if attempt >= self.max_retries:
            hint = f", last Retry-After {retry_after:.0f} s" if retry_after is not None else ""
            return RateLimitDecision(
                False, delay, f"HTTP {status}: still rate limited after {self.max_retries} re-fetches{hint}"
            )
        return RateLimitDecision(True, delay, f"HTTP {status}")
