"""Dispatchers driven by a fake ``process`` (no network) and, for memory, an injected reading on a
FakeClock: nothing here sleeps for real or allocates to make memory move."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from crawlherd.clock import FakeClock
from crawlherd.crawler.concurrency import CrawlerMonitor, MemoryAdaptiveDispatcher, SemaphoreDispatcher, SystemMemory
from crawlherd.crawler.concurrency import base as concurrency_base
from crawlherd.errors import BackendUnavailableError, ConfigurationError, MemoryPressureError
from crawlherd.frontier import Frontier, open_scheduler
from crawlherd.request import Request
from crawlherd.result import CrawlResult


class Reading:
    """An injectable memory reading, in percent."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


class Work:
    """A fake process function: each call waits for its URL's gate (or returns at once)."""

    def __init__(self, *, gated: bool = True) -> None:
        self.gated = gated
        self.started: list[str] = []
        self.running = 0
        self.max_running = 0
        self.gates: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    def gate(self, url: str) -> asyncio.Event:
        return self.gates.setdefault(url, asyncio.Event())

    def release_all(self) -> None:
        for url in list(self.gates):
            self.gates[url].set()

    async def __call__(self, request: Request) -> CrawlResult:
        self.started.append(request.url)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if self.gated:
                await self.gate(request.url).wait()
            else:
                await asyncio.sleep(0)
            if "boom" in request.url:
                raise RuntimeError("process blew up")
            return CrawlResult(url=request.url, success=True, status_code=200, request=request)
        except asyncio.CancelledError:
            self.cancelled.append(request.url)
            raise
        finally:
            self.running -= 1


async def spin(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def frontier_with(urls: list[str], clock: FakeClock | None = None) -> Frontier:
    frontier = open_scheduler("memory://", clock=clock or FakeClock(), max_in_flight=1000)
    await frontier.enqueue_requests([Request(u) for u in urls])
    return frontier


async def collect(agen: AsyncIterator[CrawlResult], out: list[CrawlResult]) -> None:
    async for r in agen:
        out.append(r)


URLS = [f"http://h{i % 3}.example/p{i}" for i in range(12)]


# -- SemaphoreDispatcher ----------------------------------------------------------------------------


async def test_semaphore_bounds_concurrency_and_yields_one_result_per_url() -> None:
    frontier = await frontier_with(URLS)
    work = Work(gated=False)
    dispatcher = SemaphoreDispatcher(3, monitor=CrawlerMonitor(enable_ui=False))
    assert dispatcher.monitor is not None
    dispatcher.monitor.add_queued(len(URLS))
    results = [r async for r in dispatcher.run(frontier, work)]
    assert sorted(r.url for r in results) == sorted(URLS)
    assert work.max_running == 3
    stats = dispatcher.monitor.get_statistics()
    assert stats["completed"] == 12 and stats["failed"] == 0 and stats["in_flight"] == 0 and stats["queued"] == 0
    assert stats["domain_counts"] == {"h0.example": 4, "h1.example": 4, "h2.example": 4}
    assert sorted(r.dispatch.task_id for r in results if r.dispatch) == list(range(1, 13))
    assert await frontier.idle()


async def test_one_bad_url_never_aborts_the_batch() -> None:
    urls = [*URLS[:5], "http://h0.example/boom", *URLS[5:]]
    frontier = await frontier_with(urls)
    results = [r async for r in SemaphoreDispatcher(4).run(frontier, Work(gated=False))]
    assert len(results) == len(urls)
    bad = [r for r in results if not r.success]
    assert [r.url for r in bad] == ["http://h0.example/boom"]
    assert bad[0].error_type == "RuntimeError" and "blew up" in (bad[0].error_message or "")
    assert (await frontier.stats()).failures == 1


async def test_closing_the_stream_cancels_work_in_flight_and_leaks_no_task() -> None:
    frontier = await frontier_with(URLS)
    work = Work()
    before = asyncio.all_tasks()
    agen = SemaphoreDispatcher(4).run(frontier, work)
    work.gate(URLS[0]).set()
    first = await agen.__anext__()  # type: ignore[attr-defined]
    assert first.url == URLS[0]
    await spin()
    assert work.running == 4
    await agen.aclose()  # type: ignore[attr-defined]
    assert work.running == 0 and len(work.cancelled) == 4
    assert asyncio.all_tasks() == before
    # The cancelled URLs went back to the frontier: nothing is lost, nothing is leased.
    stats = await frontier.stats()
    assert stats.in_flight == 0 and stats.queued == len(URLS) - 1


@pytest.mark.parametrize("make", [
    lambda: SemaphoreDispatcher(2), lambda: MemoryAdaptiveDispatcher(max_session_permit=2, memory_reader=Reading(50)),
])
async def test_a_page_task_that_lets_its_cancellation_go_by_does_not_hold_the_stop_for_ever(
    make: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A page task whose stop was swallowed on its way (a library bug) carries on; the run's stop cancels
    it again after a while and says where it was, instead of waiting for it for ever."""
    monkeypatch.setattr(concurrency_base, "_STOP_NUDGE", 0.1)
    frontier = await frontier_with(URLS[:2])
    started = asyncio.Event()

    async def deaf(request: Request) -> CrawlResult:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # the first cancellation lost, as by 3.11's wait_for
            await asyncio.sleep(3600)
        await asyncio.sleep(3600)
        raise AssertionError("not reached")

    agen = make().run(frontier, deaf)
    first = asyncio.ensure_future(agen.__anext__())
    await started.wait()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(60):  # a bound on a hang, not a timing
            await first
    assert "still running 0.1 s after their run was stopped, cancelled again" in caplog.text
    assert "deaf" in caplog.text  # where it was
    await agen.aclose()


@pytest.mark.parametrize("count", [0, -1, 2.5])
def test_semaphore_count_is_validated(count: object) -> None:
    with pytest.raises(ConfigurationError):
        SemaphoreDispatcher(count)  # type: ignore[arg-type]


# -- MemoryAdaptiveDispatcher -------------------------------------------------------------------------


def test_hysteresis_between_threshold_and_recovery() -> None:
    reading = Reading(50)
    d = MemoryAdaptiveDispatcher(memory_reader=reading)
    states = []
    for value in (50, 91, 88, 86, 84, 89, 96, 92, 86, 84):
        reading.value = value
        states.append(d.check_memory(0.0))
    assert states == [
        "normal", "pressure", "pressure", "pressure", "normal", "normal", "critical", "pressure", "pressure",
        "normal",
    ]


async def test_pressure_holds_new_work_until_recovery() -> None:
    clock = FakeClock()
    reading = Reading(92)
    frontier = await frontier_with(URLS[:5], clock)
    work = Work()
    d = MemoryAdaptiveDispatcher(check_interval=1.0, memory_reader=reading)
    results: list[CrawlResult] = []
    runner = asyncio.create_task(collect(d.run(frontier, work, clock=clock), results))
    await spin()
    assert work.started == [] and d.state == "pressure"
    reading.value = 87  # below threshold but above recovery: still held
    clock.advance(1.0)
    await spin()
    assert work.started == [] and d.state == "pressure"
    reading.value = 80
    clock.advance(1.0)
    await spin()
    assert len(work.started) == 5 and d.state == "normal"
    work.release_all()
    await runner
    assert sorted(r.url for r in results) == sorted(URLS[:5])


async def test_critical_requeues_in_flight_work_and_each_url_yields_exactly_one_result() -> None:
    clock = FakeClock()
    reading = Reading(50)
    frontier = await frontier_with(URLS[:6], clock)
    work = Work()
    monitor = CrawlerMonitor(enable_ui=False)
    monitor.add_queued(6)
    d = MemoryAdaptiveDispatcher(max_session_permit=3, check_interval=1.0, memory_reader=reading, monitor=monitor)
    results: list[CrawlResult] = []
    runner = asyncio.create_task(collect(d.run(frontier, work, clock=clock), results))
    await spin()
    assert work.started == URLS[:3]
    reading.value = 97
    clock.advance(1.0)
    await spin()
    # All but the oldest were pulled back into the frontier; nothing new started.
    assert d.state == "critical"
    assert work.cancelled == URLS[1:3] and work.running == 1
    assert (await frontier.stats()).queued == 5
    reading.value = 50
    clock.advance(1.0)
    await spin()
    work.release_all()
    for _ in range(10):
        await spin()
        work.release_all()
    await runner
    urls = [r.url for r in results]
    assert sorted(urls) == sorted(URLS[:6]) and len(urls) == 6  # exactly one result per URL
    assert Counter(work.started)[URLS[1]] == 2 and Counter(work.started)[URLS[2]] == 2
    requeued = {r.url: r.dispatch.requeues for r in results if r.dispatch}
    assert requeued[URLS[1]] == 1 and requeued[URLS[2]] == 1 and requeued[URLS[0]] == 0
    stats = monitor.get_statistics()
    assert stats["requeued"] == 2 and stats["completed"] == 6 and stats["in_flight"] == 0 and stats["queued"] == 0


async def test_memory_above_threshold_past_the_timeout_ends_the_run_clearly() -> None:
    clock = FakeClock()
    reading = Reading(93)
    frontier = await frontier_with(URLS[:4], clock)
    d = MemoryAdaptiveDispatcher(check_interval=1.0, memory_wait_timeout=5.0, memory_reader=reading)
    results: list[CrawlResult] = []
    runner = asyncio.create_task(collect(d.run(frontier, Work(), clock=clock), results))
    await spin()
    for _ in range(5):
        clock.advance(1.0)
        await spin()
        assert not runner.done()
    clock.advance(1.0)
    await spin()
    assert runner.done()
    with pytest.raises(MemoryPressureError, match="memory_wait_timeout=5"):
        await runner
    assert results == []
    assert (await frontier.stats()).queued == 4  # nothing lost


async def test_memory_pressure_while_waiting_on_the_frontier_still_ends_the_run() -> None:
    clock = FakeClock()
    reading = Reading(50)
    frontier = await frontier_with(URLS[:1], clock)
    work = Work()
    d = MemoryAdaptiveDispatcher(check_interval=1.0, memory_wait_timeout=2.0, memory_reader=reading)
    runner = asyncio.create_task(collect(d.run(frontier, work, clock=clock), []))
    await spin()
    assert work.running == 1  # the driver now waits on the frontier, not on memory
    reading.value = 92
    for _ in range(4):
        clock.advance(1.0)
        await spin()
    with pytest.raises(MemoryPressureError):
        await runner
    assert work.running == 0
    assert (await frontier.stats()).in_flight == 0


def test_thresholds_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="recovery <= threshold <= critical"):
        MemoryAdaptiveDispatcher(memory_threshold_percent=80, recovery_threshold_percent=85)
    with pytest.raises(ConfigurationError):
        MemoryAdaptiveDispatcher(max_session_permit=0)


def test_defaults_are_the_designs() -> None:
    d = MemoryAdaptiveDispatcher(memory_reader=Reading(1))
    assert (d.memory_threshold_percent, d.critical_threshold_percent, d.recovery_threshold_percent) == (90, 95, 85)
    assert (d.check_interval, d.max_session_permit, d.memory_wait_timeout) == (1.0, 20, 600)


# -- SystemMemory: cgroup v2, then v1, else the machine ------------------------------------------------


def test_system_memory_reads_cgroup_v2(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("1000000\n")
    (tmp_path / "memory.current").write_text("250000\n")
    mem = SystemMemory(tmp_path)
    assert mem.source == "cgroup v2" and mem.limit == 1_000_000
    assert mem() == pytest.approx(25.0)


def test_system_memory_falls_back_to_cgroup_v1_when_v2_has_no_limit(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.current").write_text("1\n")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("2000000\n")
    (tmp_path / "memory" / "memory.usage_in_bytes").write_text("1500000\n")
    mem = SystemMemory(tmp_path)
    assert mem.source == "cgroup v1"
    assert mem() == pytest.approx(75.0)


def test_system_memory_uses_the_machine_without_a_limit(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    # cgroup v1 reports "no limit" as a huge number.
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2**63 - 4096))
    (tmp_path / "memory" / "memory.usage_in_bytes").write_text("1500000\n")
    mem = SystemMemory(tmp_path)
    assert mem.source == "machine"
    assert 0.0 < mem() < 100.0


async def test_a_lease_that_expired_mid_fetch_does_not_end_the_run(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    frontier = open_scheduler("memory://", clock=clock, lease_timeout=5)
    await frontier.enqueue_request(Request(URLS[0]))
    work = Work()
    results: list[CrawlResult] = []
    runner = asyncio.create_task(collect(SemaphoreDispatcher(1).run(frontier, work, clock=clock), results))
    await spin()
    clock.advance(10)  # the lease expires while the fetch hangs ...
    other = await frontier.next_request()  # ... and the frontier hands the URL to someone else
    assert other is not None and other.request.url == URLS[0]
    work.release_all()
    await spin()
    assert [r.url for r in results] == [URLS[0]]  # the late result is still reported,
    assert "the frontier's lease_timeout is too short for it" in caplog.text  # with the reason,
    assert not runner.done()  # and the run goes on
    await frontier.ack(other)
    await runner


def test_the_monitor_and_the_dispatcher_share_one_memory_reader(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("1000\n")
    (tmp_path / "memory.current").write_text("400\n")
    reader = SystemMemory(tmp_path)
    monitor = CrawlerMonitor(enable_ui=False, system_memory=reader)
    d = MemoryAdaptiveDispatcher(monitor=monitor)
    assert d.memory_reader is reader
    d.check_memory(0.0)
    assert d.last_reading == pytest.approx(40.0)
    assert "40% of cgroup v2" in str(_render_text(monitor, reader))


def _render_text(monitor: CrawlerMonitor, reader: SystemMemory) -> str:
    from rich.console import Console

    monitor.memory_percent = reader()
    console = Console(record=True, width=120)
    console.print(monitor.render())
    return console.export_text()


class Unwritable:
    """A frontier (the memory one) whose settles and put-backs fail as a full disk's would while
    ``down``: the rest is the real frontier's."""

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.frontier, name)

    def _check(self) -> None:
        if self.down:
            raise BackendUnavailableError("frontier: the disk is full", role="frontier")

    async def ack(self, lease: Any) -> None:
        self._check()
        await self.frontier.ack(lease)

    async def fail(self, lease: Any, reason: str) -> None:
        self._check()
        await self.frontier.fail(lease, reason)

    async def retry(self, lease: Any, delay: float = 0.0) -> None:
        self._check()
        await self.frontier.retry(lease, delay)


@pytest.mark.parametrize("make", [
    lambda: SemaphoreDispatcher(2), lambda: MemoryAdaptiveDispatcher(max_session_permit=2, memory_reader=Reading(50)),
])
async def test_leases_held_when_the_frontier_failed_are_put_back_by_the_next_run(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frontier fails mid-run (an ack meets a full disk): the run ends with the outage, and the page
    in flight it cancels cannot be put back either. Both leases are kept and put back by the dispatcher's
    next run -- not left out until they expire (300 s here, on a clock that does not move)."""
    monkeypatch.setattr(concurrency_base, "_GIVE_BACK_BOUND", 0.2)
    urls = URLS[:3]
    frontier = Unwritable(open_scheduler("memory://", clock=FakeClock(), lease_timeout=300, max_in_flight=10))
    await frontier.enqueue_requests([Request(u) for u in urls])
    dispatcher = make()
    work = Work()
    results: list[CrawlResult] = []
    runner = asyncio.create_task(collect(dispatcher.run(cast(Frontier, frontier), work), results))
    await spin()
    assert sorted(work.started) == sorted(urls[:2])
    frontier.down = True
    work.gate(urls[0]).set()  # fetched; its ack fails
    with pytest.raises(BackendUnavailableError, match="disk is full"):
        await runner
    assert urls[1] in work.cancelled and results == []  # (and the third, leased meanwhile by one of them)
    assert (await frontier.stats()).in_flight == 1 + len(work.cancelled)
    # still down: the next run says so, and keeps them (the guard: without them it waits for leases
    # that never expire)
    with pytest.raises(BackendUnavailableError):
        async with asyncio.timeout(10):
            await collect(dispatcher.run(cast(Frontier, frontier), work), results)
    frontier.down = False
    work.gated = False
    async with asyncio.timeout(10):
        await collect(dispatcher.run(cast(Frontier, frontier), work), results)
    assert sorted(r.url for r in results) == sorted(urls)
    stats = await frontier.stats()
    assert stats.in_flight == 0 and stats.acked == 3 and await frontier.idle()
