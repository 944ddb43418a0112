"""RateLimiter maths on a FakeClock: spacing without bursts, Retry-After, back-off, decay, give-up."""

from __future__ import annotations

import random
from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlherd.clock import FakeClock
from crawlherd.crawler.concurrency.rate_limiter import RateLimiter, parse_retry_after
from crawlherd.errors import ConfigurationError


def limiter(**kw: object) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock()
    return RateLimiter(clock=clock, rng=random.Random(7), **kw), clock  # type: ignore[arg-type]


def test_many_waiters_on_one_domain_are_spaced_not_burst() -> None:
    rl, clock = limiter(base_delay=(1.0, 1.0))
    waits = [rl.reserve("a.example") for _ in range(10)]
    # Ten tasks asking at the same instant get slots 0, 1, 2, ... seconds away: no burst.
    assert waits == pytest.approx([float(i) for i in range(10)])
    # Another domain is not held up by the first one.
    assert rl.reserve("b.example") == 0.0


def test_random_base_delay_stays_in_range_and_slots_never_overlap() -> None:
    rl, clock = limiter(base_delay=(1.0, 3.0))
    slots = [clock.now() + rl.reserve("h") for _ in range(50)]
    gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)]
    assert min(gaps) >= 1.0 and max(gaps) <= 3.0
    assert len(set(round(g, 6) for g in gaps)) > 5  # really drawn, not constant


def test_slot_passes_with_time() -> None:
    rl, clock = limiter(base_delay=(2.0, 2.0))
    assert rl.reserve("h") == 0.0
    clock.advance(5.0)
    assert rl.reserve("h") == 0.0
    assert rl.reserve("h") == pytest.approx(2.0)


def test_zero_delay_never_waits() -> None:
    rl, _ = limiter(base_delay=(0.0, 0.0))
    assert all(rl.reserve("h") == 0.0 for _ in range(100))


def test_retry_after_seconds_is_honoured_and_blocks_the_domain() -> None:
    rl, clock = limiter(base_delay=(0.0, 0.0), max_delay=60)
    d = rl.on_rate_limited("h", 429, 7.0, attempt=0)
    assert d.retry and d.delay == pytest.approx(7.0)
    # Everybody else asking for the domain now waits for the window too, spaced by the new delay.
    assert rl.reserve("h") == pytest.approx(7.0)
    assert rl.reserve("h") == pytest.approx(14.0)


def test_retry_after_longer_than_max_delay_gives_up_with_the_reason() -> None:
    rl, _ = limiter(max_delay=30)
    d = rl.on_rate_limited("h", 429, 120.0, attempt=0)
    assert not d.retry
    assert "Retry-After 120 s" in d.reason and "max_delay=30" in d.reason


def test_exponential_backoff_with_jitter_up_to_max_delay() -> None:
    rl, _ = limiter(base_delay=(1.0, 1.0), max_delay=20, max_retries=10, jitter=0.25)
    delays = [rl.on_rate_limited("h", 503, None, attempt=i).delay for i in range(8)]
    assert delays[0] == pytest.approx(2.0, rel=0.25)
    for prev, cur in zip(delays, delays[1:], strict=False):
        assert cur >= min(20.0, prev * 2 * 0.75) - 1e-9
    assert max(delays) <= 20.0
    assert delays[-1] == pytest.approx(20.0, rel=0.25)
    # Jitter: two limiters with other seeds do not back off in lockstep.
    other = RateLimiter(base_delay=(1.0, 1.0), max_delay=20, max_retries=10, clock=FakeClock(), rng=random.Random(99))
    assert other.on_rate_limited("h", 503, None, 0).delay != delays[0]


def test_decays_on_success_back_to_base() -> None:
    rl, _ = limiter(base_delay=(1.0, 1.0), max_delay=60)
    rl.on_rate_limited("h", 429, 16.0, attempt=0)
    assert rl.delay_of("h") == 16.0
    seen = []
    for _ in range(20):
        rl.on_success("h")
        seen.append(rl.delay_of("h"))
    assert seen[0] == pytest.approx(12.0)
    assert all(b <= a for a, b in zip(seen, seen[1:], strict=False))
    assert seen[-1] == 1.0


def test_gives_up_after_max_retries_with_reason() -> None:
    rl, _ = limiter(max_retries=3)
    decisions = [rl.on_rate_limited("h", 429, 1.0, attempt=i) for i in range(4)]
    assert [d.retry for d in decisions] == [True, True, True, False]
    assert "after 3 re-fetches" in decisions[-1].reason and "429" in decisions[-1].reason


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now) == pytest.approx(30.0, abs=1)
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("", now) is None


@given(lo=st.floats(0, 5), span=st.floats(0, 5), n=st.integers(1, 30))
def test_property_slots_are_at_least_low_apart(lo: float, span: float, n: int) -> None:
    clock = FakeClock()
    rl = RateLimiter(base_delay=(lo, lo + span), max_delay=100, clock=clock)
    slots = [rl.reserve("h") for _ in range(n)]
    assert all(b - a >= lo - 1e-6 for a, b in zip(slots, slots[1:], strict=False))


@pytest.mark.parametrize(
    "kw",
    [
        {"base_delay": (3.0, 1.0)},
        {"base_delay": (-1.0, 1.0)},
        {"max_delay": 0.5},
        {"max_retries": -1},
        {"decay": 0.0},
        {"jitter": 1.5},
    ],
)
def test_bad_options_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        RateLimiter(**kw)  # type: ignore[arg-type]


def test_a_late_waker_pushes_the_ones_after_it() -> None:
    rl, clock = limiter(base_delay=(1.0, 1.0))
    assert [rl.reserve("h") for _ in range(3)] == pytest.approx([0.0, 1.0, 2.0])
    assert rl.claim("h") == 0.0  # first sends at t=0
    clock.advance(1.5)  # the second one's event loop woke it half a second late
    assert rl.claim("h") == 0.0
    clock.advance(0.5)  # the third wakes on its slot, t=2: only 0.5 s after the second really left
    assert rl.claim("h") == pytest.approx(0.5)  # held until 1 s after the second's real send
    clock.advance(0.5)
    assert rl.claim("h") == 0.0


def test_claim_is_free_without_spacing() -> None:
    rl, _ = limiter(base_delay=(0.0, 0.0))
    assert not rl.spaced("h")
    rl.on_rate_limited("h", 429, 2.0, attempt=0)
    assert rl.spaced("h")
