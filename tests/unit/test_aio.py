"""The package's asyncio helpers: cancel_and_wait in cleanup after a cancellation, and the stall
deadline of wait_while_progressing."""

from __future__ import annotations

import asyncio
import time

import pytest

from crawlherd._aio import cancel_and_wait, wait_while_progressing


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
