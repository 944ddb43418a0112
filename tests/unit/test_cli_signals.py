"""A stop that hangs says where: the chain of awaits of every task still running."""

from __future__ import annotations

import asyncio
import logging

import pytest

from crawlherd.cli._signals import _still_stopping, awaiting


async def _inner(gate: asyncio.Event) -> None:
    await gate.wait()


async def _outer(gate: asyncio.Event) -> None:
    await _inner(gate)


async def test_awaiting_names_every_await_of_a_task() -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_outer(gate), name="stuck")
    await asyncio.sleep(0)
    where = awaiting(task)
    assert where.index("_outer") < where.index("_inner") < where.index("wait")
    assert "test_cli_signals.py" in where
    gate.set()
    await task


async def test_an_overdue_stop_logs_each_running_task(caplog: pytest.LogCaptureFixture) -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_outer(gate), name="stuck-page-loop")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="crawlherd.cli"):
        _still_stopping(31.0)
    gate.set()
    await task
    (record,) = caplog.records
    assert "still stopping after 31 s" in record.getMessage()
    assert "stuck-page-loop: _outer" in record.getMessage()
