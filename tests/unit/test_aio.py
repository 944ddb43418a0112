"""The package's asyncio helpers: cancel_and_wait in cleanup after a cancellation, and the stall
deadline of wait_while_progressing, and until_done's stop and cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from crawlherd._aio import cancel_and_wait, until_done, wait_while_progressing


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
    """Something moved whenever the watch looks (a peer answering all along): the wait goes on past four
    timeouts. (A ticker every half timeout once stood for the peer: on a busy machine its ticks came late.)"""
    looked = 0

    def progress() -> float:
        nonlocal looked
        looked += 1
        return time.monotonic()

    slow = asyncio.sleep(0.4, result="done")  # 4 timeouts long
    assert await wait_while_progressing(slow, 0.1, progress) == "done"
    assert looked >= 1  # it did look: the wait outlived its first timeout because of the progress


async def test_wait_while_progressing_gives_up_on_a_stall_and_cancels() -> None:
    stalled = asyncio.ensure_future(asyncio.sleep(3600))
    with pytest.raises(TimeoutError):
        await wait_while_progressing(stalled, 0.1, lambda: 0.0)
    assert stalled.cancelled()


async def test_wait_while_progressing_keeps_the_callers_cancellation_and_the_awaitables_own_timeout() -> None:
    async def times_out() -> None:
        raise TimeoutError("its own")

    with pytest.raises(TimeoutError, match="its own"):
        await wait_while_progressing(times_out(), 10, lambda: 0.0)
    waiting = asyncio.create_task(wait_while_progressing(asyncio.sleep(3600), 10, lambda: 0.0))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def _numbers(delays: list[float], closed: list[str]) -> AsyncIterator[int]:
    try:
        for i, delay in enumerate(delays):
            await asyncio.sleep(delay)
            yield i
    finally:
        closed.append("closed")


async def test_until_done_stops_a_pending_wait_and_leaves_the_caller_uncancelled() -> None:
    closed: list[str] = []
    stop = asyncio.get_running_loop().create_future()
    source = _numbers([0, 0, 30], closed)
    got = []
    async for item in until_done(source, stop):
        got.append(item)
        if item == 1:
            asyncio.get_running_loop().call_later(0.05, stop.set_result, None)
    assert got == [0, 1]  # the third item, 30 s away, was not waited for
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation left behind for the caller
    await source.aclose()
    assert closed == ["closed"]


async def test_until_done_a_stop_while_the_caller_holds_an_item_ends_at_the_next_one() -> None:
    stop = asyncio.get_running_loop().create_future()
    got = []
    async for item in until_done(_numbers([0, 0, 0], []), stop):
        got.append(item)
        stop.set_result(None)
        await asyncio.sleep(0.01)  # the stop comes while the caller works, not while it waits
    assert got == [0]


async def test_until_done_passes_the_callers_cancellation_on() -> None:
    stop = asyncio.get_running_loop().create_future()
    closed: list[str] = []

    async def consume() -> None:
        async for _ in until_done(_numbers([0, 30], closed), stop):
            pass

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stop.set_result(None)
    assert closed == ["closed"]
