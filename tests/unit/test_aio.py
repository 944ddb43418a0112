"""The package's asyncio helpers: cancel_and_wait in cleanup after a cancellation, and the stall
deadline of wait_while_progressing."""

from __future__ import annotations

import asyncio
import time

import pytest

from crawlherd._aio import cancel_and_wait, wait_while_progressing
from crawlherd._resilience import Batcher


async def test_cancel_and_wait_in_cleanup_after_a_cancellation_lets_the_cleanup_finish() -> None:
    cleaned = []

    async def owner() -> None:
        helper = asyncio.create_task(asyncio.sleep(3600))
        try:
            await asyncio.sleep(3600)
        finally:  # cancelled above: the cleanup must still run to its end
            await cancel_and_wait(helper)
            cleaned.append(helper.cancelled())

    task = asyncio.create_task(owner())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


async def test_cancel_and_wait_passes_on_a_cancellation_asked_while_it_waits() -> None:
    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.2)  # takes a while to finish its own cancellation

    async def owner() -> str:
        helper = asyncio.create_task(stubborn())
        await asyncio.sleep(0.01)  # the helper runs, into its sleep
        await cancel_and_wait(helper)
        return "went on"

    task = asyncio.create_task(owner())
    await asyncio.sleep(0.1)
    task.cancel()  # while it waits for the helper's slow finish
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wait_while_progressing_waits_past_the_timeout_while_there_is_progress() -> None:
    progress = time.monotonic()

    async def ticker() -> None:
        nonlocal progress
        for _ in range(10):
            await asyncio.sleep(0.05)
            progress = time.monotonic()

    ticking = asyncio.create_task(ticker())
    slow = asyncio.sleep(0.4, result="done")  # 4 timeouts long, with progress all along
    assert await wait_while_progressing(slow, 0.1, lambda: progress) == "done"
    await ticking


async def test_wait_while_progressing_gives_up_on_a_stall_and_cancels() -> None:
    stalled = asyncio.ensure_future(asyncio.sleep(3600))
    with pytest.raises(TimeoutError):
        await wait_while_progressing(stalled, 0.1, lambda: 0.0)
    assert stalled.cancelled()


async def test_batched_serves_the_calls_made_meanwhile_in_one_round_trip() -> None:
    from crawlherd._resilience import Batcher

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
    from crawlherd._resilience import Batcher

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
    failing: Batcher[str, str] = Batcher(run)
    gate.clear()
    waiting = asyncio.ensure_future(failing("c"))
    await asyncio.sleep(0)
    await failing.close()  # no caller is left hanging
    with pytest.raises(asyncio.CancelledError):
        await waiting
