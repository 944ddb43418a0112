"""The resilience kernel (:mod:`crawlherd._resilience`): the back-off, the outage log, the retry runner
and the batcher. No test here sleeps: the runner's sleep and clock are injected."""

from __future__ import annotations

import asyncio
import logging

import pytest

from crawlherd._resilience import (
    Batcher,
    OutageLog,
    Retrier,
    RetryPolicy,
    Stopped,
    backoff_delay,
    role_of,
    service_name,
    watch,
    with_role,
)
from crawlherd.errors import BackendUnavailableError, BrokerError


class FakeTime:
    """A clock that only moves when the retrier sleeps; records each sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # a turn of the loop, no time


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]


def make(time: FakeTime, **policy: float | None) -> Retrier:
    return Retrier(
        OutageLog(logging.getLogger("t"), "worker w"),
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
        sleep=time.sleep,
        clock=time.clock,
    )


def flaky(errors: list[BaseException], result: str = "ok") -> tuple[list[int], object]:
    """A call that raises ``errors`` one per call, then returns ``result``; and its call count."""
    calls = [0]

    async def fn() -> str:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return result

    return calls, fn


# -- the back-off ---------------------------------------------------------------------------------------


def test_backoff_grows_and_is_capped() -> None:
    assert 0.4 <= backoff_delay(1) <= 0.6
    assert 3.2 <= backoff_delay(4) <= 4.8
    assert backoff_delay(100) <= 30.0


def test_backoff_without_jitter_doubles_from_base_to_cap() -> None:
    assert [backoff_delay(n, base=5.0, cap=600.0, jitter=0.0) for n in (0, 1, 2, 3, 8, 9)] == [
        5.0, 5.0, 10.0, 20.0, 600.0, 600.0,
    ]
    delays = {backoff_delay(3, base=1.0, cap=100.0, jitter=0.2) for _ in range(200)}
    assert min(delays) >= 3.2 and max(delays) <= 4.8 and len(delays) > 1  # jittered, within 20 %


# -- the outage log ---------------------------------------------------------------------------------------


def test_one_warning_and_one_info_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    outages = OutageLog(logging.getLogger("t"), "worker w")
    assert outages.up("broker") is False  # never down: nothing said
    assert outages.down("broker", "refused") is True
    for _ in range(50):
        assert outages.down("broker", "refused") is False
    assert outages.up("broker") is True
    assert outages.down("broker", "stale pooled connection") is False  # within the grace: same outage
    assert outages.up("broker") is True
    lines = said(caplog)
    assert [level for level, _ in lines] == ["WARNING", "INFO"]
    assert "broker unavailable (refused)" in lines[0][1] and "broker is back after" in lines[1][1]


def test_the_database_role_is_said_as_the_config_db(caplog: pytest.LogCaptureFixture) -> None:
    outages = OutageLog(logging.getLogger("t"), "worker w", grace=0.0)
    assert service_name("database") == "config DB" and service_name("frontier") == "frontier"
    assert outages.down("database", "refused") is True
    assert outages.down("config DB", "refused") is False  # the same outage, by either name
    assert outages.down_now == {"config DB"}
    assert outages.up("config DB") is True and outages.up("database") is False
    first = said(caplog)[0][1]
    assert first == "worker w: config DB unavailable (refused); carrying on, retrying with back-off"


def test_role_of_and_with_role() -> None:
    typed = BackendUnavailableError("gone", backend="redis", role="frontier")
    untyped = BackendUnavailableError("gone", backend="redis")
    assert role_of(typed, "broker") == "frontier" and role_of(untyped, "broker") == "broker"
    assert role_of(ValueError("x"), "sink") == "sink"
    with pytest.raises(BackendUnavailableError) as info, with_role("broker"):
        raise untyped
    assert info.value.role == "broker"
    with pytest.raises(BackendUnavailableError) as info, with_role("broker"):
        raise typed
    assert info.value.role == "frontier"  # a role the backend set is kept
    with pytest.raises(ValueError, match="x"), with_role("broker"):
        raise ValueError("x")


# -- the retry runner ---------------------------------------------------------------------------------------


async def test_retrier_retries_temporary_errors_and_says_the_outage_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    time = FakeTime()
    retrier = make(time, jitter=0.0)
    calls, fn = flaky([BackendUnavailableError("down", role="broker") for _ in range(5)])
    assert await retrier.call(fn, role="frontier") == "ok"  # type: ignore[arg-type]
    assert calls == [6]
    assert time.slept == [0.5, 1.0, 2.0, 4.0, 8.0]  # the back-off, on the injected sleep
    lines = said(caplog)
    assert [level for level, _ in lines] == ["WARNING", "INFO"]
    assert "broker unavailable" in lines[0][1] and "broker is back after" in lines[1][1]  # the error's role
    assert not retrier.outages.down_now


async def test_retrier_lets_other_errors_go_at_once(caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime()
    retrier = make(time)
    calls, fn = flaky([BrokerError("lost"), BackendUnavailableError("down")])
    with pytest.raises(BrokerError, match="lost"):
        await retrier.call(fn, role="broker")  # type: ignore[arg-type]
    assert calls == [1] and time.slept == [] and not said(caplog)
    # its own list of temporary errors
    timeouts = Retrier(retrier.outages, temporary=(TimeoutError,), sleep=time.sleep, clock=time.clock)
    calls, fn = flaky([TimeoutError(), BackendUnavailableError("down")])
    with pytest.raises(BackendUnavailableError):
        await timeouts.call(fn, role="broker")  # type: ignore[arg-type]
    assert calls == [2] and len(time.slept) == 1
    assert timeouts.is_temporary(TimeoutError()) and not timeouts.is_temporary(BackendUnavailableError("x"))


async def test_retrier_gives_up_at_its_deadline_with_the_last_error() -> None:
    time = FakeTime()
    retrier = make(time, base=1.0, cap=4.0, jitter=0.0, deadline=10.0)
    errors: list[BaseException] = [BackendUnavailableError(f"down {i}") for i in range(100)]
    calls, fn = flaky(errors)
    with pytest.raises(BackendUnavailableError, match="down 4"):
        await retrier.call(fn, role="frontier")  # type: ignore[arg-type]
    # 1 + 2 + 4 + 3 (what was left of the deadline, not another 4): the last try is at the deadline
    assert time.slept == [1.0, 2.0, 4.0, 3.0] and calls == [5]
    assert time.now - 1000.0 == 10.0
    assert retrier.outages.down_now == {"frontier"}  # not back: the caller decides what comes next


async def test_a_deadline_counts_from_the_first_failure_of_each_outage() -> None:
    time = FakeTime()
    retrier = make(time, base=1.0, jitter=0.0, deadline=2.5)
    attempts = retrier.attempts("broker")
    await attempts.failed(BackendUnavailableError("a"))
    await attempts.failed(BackendUnavailableError("b"))
    attempts.succeeded()  # a new outage starts its own deadline
    time.now += 100.0
    await attempts.failed(BackendUnavailableError("c"))
    await attempts.failed(BackendUnavailableError("d"))
    with pytest.raises(BackendUnavailableError, match="e"):
        await attempts.failed(BackendUnavailableError("e"))
    assert time.slept == [1.0, 1.5, 1.0, 1.5]


async def test_retrier_stops_waiting_when_told_to() -> None:
    cancelled: list[float] = []

    async def sleep(seconds: float) -> None:
        try:
            await asyncio.Event().wait()  # a back-off that would never end
        except asyncio.CancelledError:
            cancelled.append(seconds)
            raise

    retrier = Retrier(OutageLog(logging.getLogger("t"), "w"), sleep=sleep)
    stop = asyncio.Event()
    calls, fn = flaky([BackendUnavailableError("down") for _ in range(3)])
    waiting = asyncio.ensure_future(retrier.call(fn, role="broker", stop=stop))  # type: ignore[arg-type]
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done() and calls == [1]
    stop.set()
    with pytest.raises(Stopped):
        await waiting
    assert calls == [1] and len(cancelled) == 1  # the sleep was cancelled, not awaited to its end
    with pytest.raises(Stopped):  # already set: no wait at all
        await retrier.wait(1.0, stop)


async def test_retrier_wait_without_stop_is_the_injected_sleep() -> None:
    time = FakeTime()
    retrier = make(time)
    await retrier.wait(2.5)
    await retrier.wait(1.0, asyncio.Event())  # a stop never set: the sleep decides
    assert time.slept == [2.5, 1.0]


async def test_attempts_for_a_loop_of_several_calls(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    time = FakeTime()
    retrier = make(time, jitter=0.0)
    attempts = retrier.attempts("frontier")
    attempts.succeeded()  # nothing was down: nothing said
    await attempts.failed(BackendUnavailableError("db", role="database"))
    await attempts.failed(BackendUnavailableError("frontier"))  # no role: the loop's own
    assert attempts.failures == 2 and retrier.outages.down_now == {"config DB", "frontier"}
    attempts.succeeded()
    assert attempts.failures == 0 and not retrier.outages.down_now
    lines = [m for _, m in said(caplog)]
    assert sum("unavailable" in m for m in lines) == 2 and sum("is back" in m for m in lines) == 2
    await attempts.failed(BackendUnavailableError("again"))
    assert time.slept == [0.5, 1.0, 0.5]  # the count started again


# -- the batcher ---------------------------------------------------------------------------------------


async def test_batched_serves_the_calls_made_meanwhile_in_one_round_trip() -> None:
    rounds: list[list[int]] = []
    gate = asyncio.Event()

    async def run(args: list[int]) -> list[int | BaseException]:
        rounds.append(args)
        await gate.wait()
        return [ValueError(f"odd {a}") if a % 2 else a * 10 for a in args]

    batched: Batcher[int, int] = Batcher(run)
    calls = [asyncio.ensure_future(batched(i)) for i in range(5)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    late = [asyncio.ensure_future(batched(i)) for i in (6, 7)]  # while the first round trip is out
    gate.set()
    results = await asyncio.gather(*calls, *late, return_exceptions=True)
    assert rounds == [[0, 1, 2, 3, 4], [6, 7]]
    assert [r if isinstance(r, int) else str(r) for r in results] == [0, "odd 1", 20, "odd 3", 40, 60, "odd 7"]
    assert (batched.batches, batched.calls) == (2, 7)


async def test_batched_hands_the_result_of_a_cancelled_caller_to_orphan() -> None:
    gate = asyncio.Event()
    orphans: list[str] = []

    async def run(args: list[str]) -> list[str | BaseException]:
        await gate.wait()
        return [a.upper() for a in args]

    async def orphan(result: str) -> None:
        orphans.append(result)

    batched: Batcher[str, str] = Batcher(run, orphan=orphan)
    kept, gone = asyncio.ensure_future(batched("a")), asyncio.ensure_future(batched("b"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    gone.cancel()  # while its round trip is out: the round trip goes on, its result is given back
    gate.set()
    assert await kept == "A"
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert orphans == ["B"]


async def test_batched_close_cancels_the_round_trip_and_every_caller() -> None:
    gate = asyncio.Event()
    started: list[list[str]] = []

    async def run(args: list[str]) -> list[str | BaseException]:
        started.append(args)
        await gate.wait()
        return list(args)

    batched: Batcher[str, str] = Batcher(run)
    running = asyncio.ensure_future(batched("c"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    queued = asyncio.ensure_future(batched("d"))  # waits for the round trip out
    await asyncio.sleep(0)
    await batched.close()  # no caller is left hanging
    for waiting in (running, queued):
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert started == [["c"]]
    gate.set()
    assert await batched("e") == "e"  # usable again after close


async def test_batched_bounds_a_round_trip_in_count_and_bytes() -> None:
    rounds: list[list[str]] = []
    gate = asyncio.Event()

    async def run(args: list[str]) -> list[str | BaseException]:
        rounds.append(args)
        await gate.wait()
        return list(args)

    batched: Batcher[str, str] = Batcher(run, max_batch=3, max_bytes=10, size=len)
    first = asyncio.ensure_future(batched("x"))  # goes out alone, at once
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(batched(a)) for a in ("aaaa", "bbbb", "cc", "d", "e", "f", "g" * 25, "h")]
    gate.set()
    assert await asyncio.gather(first, *rest) == ["x", "aaaa", "bbbb", "cc", "d", "e", "f", "g" * 25, "h"]
    # 4+4+2 = 10 bytes; then three (the count bound); an arg over the byte bound goes alone
    assert rounds == [["x"], ["aaaa", "bbbb", "cc"], ["d", "e", "f"], ["g" * 25], ["h"]]


async def test_batched_runs_up_to_concurrency_round_trips_at_once() -> None:
    out = 0
    most = 0
    gate = asyncio.Event()

    async def run(args: list[int]) -> list[int | BaseException]:
        nonlocal out, most
        out += 1
        most = max(most, out)
        await gate.wait()
        out -= 1
        return list(args)

    batched: Batcher[int, int] = Batcher(run, max_batch=1, concurrency=3)
    calls = [asyncio.ensure_future(batched(i)) for i in range(10)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert out == 3  # three round trips out, the other calls waiting for a slot
    gate.set()
    assert await asyncio.gather(*calls) == list(range(10))
    assert most == 3 and batched.batches == 10


async def test_a_failed_round_trip_fails_every_caller_in_it_and_not_the_others() -> None:
    gate = asyncio.Event()
    rounds: list[list[int]] = []

    async def run(args: list[int]) -> list[int | BaseException]:
        rounds.append(args)
        await gate.wait()
        if len(rounds) == 2:
            raise BackendUnavailableError("down", role="sink")
        return list(args)

    batched: Batcher[int, int] = Batcher(run)
    first = asyncio.ensure_future(batched(0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    second = [asyncio.ensure_future(batched(i)) for i in (1, 2)]
    gate.set()
    results = await asyncio.gather(first, *second, return_exceptions=True)
    assert rounds == [[0], [1, 2]]
    assert results[0] == 0 and all(isinstance(r, BackendUnavailableError) for r in results[1:]), results
    assert await batched(7) == 7  # the next round trip is a new one
    assert (batched.batches, batched.calls) == (2, 2)  # the failed one is not counted


def test_batcher_checks_its_bounds() -> None:
    async def run(args: list[int]) -> list[int | BaseException]:
        return list(args)

    for bad in ({"max_batch": 0}, {"concurrency": 0}, {"max_bytes": 10}, {"size": len}):
        with pytest.raises(ValueError, match="must be >= 1|go together"):
            Batcher(run, **bad)  # type: ignore[arg-type]


async def test_describe_says_the_outages_under_way_and_watch_keeps_them_current() -> None:
    outages = OutageLog(logging.getLogger("t"), "dispatcher d")
    assert outages.describe() == ""
    answers = [BackendUnavailableError("refused", role="broker"), BackendUnavailableError("refused"), 0]
    stop = asyncio.Event()
    seen: list[str] = []

    async def check() -> int:
        answer = answers.pop(0)
        if not answers:
            stop.set()
        if isinstance(answer, Exception):
            raise answer
        seen.append(outages.describe())
        return answer

    await watch(outages, "broker", check, every=0.001, stop=stop)
    assert seen == ["broker unavailable for 0 s"]  # down until the answer that ended the outage
    assert outages.describe() == "" and outages.down_now == frozenset()


async def test_watch_does_not_end_an_outage_it_did_not_find() -> None:
    outages = OutageLog(logging.getLogger("t"), "dispatcher d")
    outages.down("broker", "publish refused")  # the relay's own finding
    stop = asyncio.Event()

    async def check() -> int:
        stop.set()
        return 0  # the cheap call answers: not enough to say the publishes work again

    await watch(outages, "broker", check, every=0.001, stop=stop)
    assert outages.down_now == frozenset({"broker"})
