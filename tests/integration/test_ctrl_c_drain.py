"""One Ctrl+C drains: ``crawlherd run`` (dispatcher, worker and console in one process) with jobs in
flight gets one SIGINT -- or one SIGTERM, what a deploy sends -- finishes (or requeues) every job in
flight within the grace period, leaves none ``running`` and exits 0 with no asyncio error on the way
out. With the console served, uvicorn's own signal capture used to turn the one signal into two (the
second aborting the jobs): the ``console`` cases failed before the fix."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import JobRun
from tests.integration.test_worker import Board, board, load, website  # noqa: F401 - the board fixture
from tests.support.forkserver import exec_crawlherd

KEYWORDS = [f"k{n}" for n in range(4)]
BAD_LOG = ("Traceback", "Task exception", "Task was destroyed", "Unclosed", "unclosed", "CancelledError")


async def runs(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(JobRun.status))).scalars().all())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("console", [True, False], ids=["console", "no-console"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_one_signal_drains_the_jobs_in_flight(
    engine: AsyncEngine, board: Board, tmp_path: Path, sig: signal.Signals, console: bool  # noqa: F811
) -> None:
    board.slow = 1.0  # each listing page takes 1 s: the signal lands while pages are being fetched
    await load(engine, tmp_path, website(board, robots="ignore"), KEYWORDS, due=True)
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as log_file:
        proc = await exec_crawlherd(
            "run", "--database-url", str(engine.url), "--allow-private",
            *(["--console-port", "0"] if console else ["--no-console"]), "--concurrency", "2", "--interval", "0.2",
            stdout=log_file, stderr=asyncio.subprocess.STDOUT, env={**os.environ, "PYTHONWARNINGS": "default"},
        )
        try:
            while board.in_flight == 0:  # a listing page is being fetched: a job is in flight
                assert proc.returncode is None, log_path.read_text()
                await asyncio.sleep(0.02)
            proc.send_signal(sig)
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    log = log_path.read_text()
    assert proc.returncode == 0, log
    assert "stopping… waiting for" in log, log
    for bad in BAD_LOG:
        assert bad not in log, log
    states = await runs(engine)
    assert "running" not in states, (states, log)
    assert states.count("succeeded") >= 1, (states, log)  # the job in flight finished
