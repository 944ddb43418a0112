"""CRAWLHERD_TRACEMALLOC: the opt-in report of what grows in a long-running process."""

from __future__ import annotations

import asyncio
import logging
import tracemalloc

import pytest

from crawlherd._memtrace import frames_from_env, growth_report, interval_from_env, memory_line, traced


def test_the_interval_and_frames_come_from_the_environment(caplog: pytest.LogCaptureFixture) -> None:
    assert interval_from_env({}) is None
    assert interval_from_env({"CRAWLHERD_TRACEMALLOC": ""}) is None
    assert interval_from_env({"CRAWLHERD_TRACEMALLOC": "0"}) is None
    assert interval_from_env({"CRAWLHERD_TRACEMALLOC": "30"}) == 30.0
    assert interval_from_env({"CRAWLHERD_TRACEMALLOC": "soon"}) is None
    assert "is not a number of seconds" in caplog.text
    assert frames_from_env({}) == 6
    assert frames_from_env({"CRAWLHERD_TRACEMALLOC_FRAMES": "0"}) == 0
    assert frames_from_env({"CRAWLHERD_TRACEMALLOC_FRAMES": "12"}) == 12


def test_the_report_names_the_line_that_grew() -> None:
    tracemalloc.start(3)
    try:
        before = tracemalloc.take_snapshot()
        grown = [bytearray(1000) for _ in range(500)]  # the line that grows
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    report = growth_report(before, after)
    first = report.splitlines()[0]
    assert "test_memtrace.py:" in first and float(first.split()[0]) >= 488, report  # 500,000 bytes and more
    assert "stack of" in report and "innermost last" in report
    assert len(grown) == 500


def test_the_memory_line_gives_rss_and_python_blocks() -> None:
    line = memory_line()
    assert "RSS " in line and "Python blocks" in line


@pytest.mark.timeout(30)
async def test_traced_reports_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "crawlherd.memtrace")
    assert await traced(asyncio.sleep(0.35, "done"), 0.1) == "done"
    tracemalloc.stop()
    messages = [r.getMessage() for r in caplog.records if r.name == "crawlherd.memtrace"]
    assert messages[0].startswith("tracemalloc: baseline after 0s")
    assert any(m.startswith("tracemalloc at 0s") and "growth since the baseline" in m for m in messages), messages
