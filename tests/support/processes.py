"""Real ``crawlherd`` processes for fault tests: started as subprocesses with their output in a log
file, stopped with SIGTERM by their own PID, and their logs checked for what an outage must (once)
and must not (a traceback) leave there. Waits are polls with a deadline (:func:`wait_until`)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db import JobRun

from . import forkserver

__all__ = ["BAD_LOG", "WAIT_DEADLINE", "CliProcess", "job_statuses", "outage_lines", "wait_until"]

ROOT = Path(__file__).resolve().parents[2]

#: What a clean log never holds, whatever the faults.
BAD_LOG = ("Traceback", "asynchronous generator is already running", "Unclosed", "unclosed", "Task exception")


class CliProcess:
    """``python -m crawlherd -v <args>`` (the test tree importable, so ``tests.support`` brokers
    resolve), its stdout and stderr in ``log_path``."""

    def __init__(self, args: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None) -> None:
        self.args = ["-m", "crawlherd", "-v", *args]
        self.log_path = log_path
        self.env = {**os.environ, "PYTHONWARNINGS": "default", **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p)
        self.proc: asyncio.subprocess.Process | forkserver.ForkedProcess | None = None

    async def start(self) -> CliProcess:
        with self.log_path.open("ab") as log:
            if forkserver.enabled():
                self.proc = await forkserver.start("crawlherd", self.args[2:], env=self.env, cwd=ROOT,
                                                   stdout=log.fileno(), stderr=asyncio.subprocess.STDOUT)
            else:
                self.proc = await asyncio.create_subprocess_exec(
                    sys.executable, *self.args, stdout=log, stderr=asyncio.subprocess.STDOUT, env=self.env, cwd=ROOT)
        return self

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def check_alive(self) -> None:
        assert self.proc is not None and self.proc.returncode is None, f"{self.args} exited:\n{self.log}"

    async def stop(self) -> int:
        """SIGTERM (by PID) and wait for the exit; SIGKILL if it does not stop within a minute."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 60)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode

    def assert_clean(self) -> None:
        """Exited 0, and no traceback or unclosed resource in the log."""
        log = self.log
        assert self.proc is not None and self.proc.returncode == 0, log
        for bad in BAD_LOG:
            assert bad not in log, log


#: Seconds :func:`wait_until` waits by default before it fails.
WAIT_DEADLINE = 90.0


async def wait_until(
    condition: Callable[[], Awaitable[bool]],
    *,
    alive: Sequence[CliProcess] = (),
    every: float = 0.1,
    deadline: float = WAIT_DEADLINE,
) -> None:
    """Poll ``condition`` every ``every`` seconds until true, failing at once when one of ``alive``
    exits, and after ``deadline`` seconds with the condition's name and the processes' logs."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline
    while not await condition():
        for proc in alive:
            proc.check_alive()
        if loop.time() >= give_up:
            name = getattr(condition, "__qualname__", repr(condition))
            logs = "".join(f"\n--- {' '.join(p.args)}:\n{p.log[-4000:]}" for p in alive)
            raise AssertionError(f"wait_until: {name} still false after {deadline:g} s{logs}")
        await asyncio.sleep(every)


def outage_lines(log: str, service: str) -> tuple[list[str], list[str]]:
    """The log's "``service`` unavailable" warnings and "``service`` is back after" lines."""
    lines = log.replace("\r", "\n").splitlines()
    lost = [line for line in lines if " WARNING " in line and f": {service} unavailable (" in line]
    back = [line for line in lines if f": {service} is back after " in line]
    return lost, back


async def job_statuses(engine: AsyncEngine) -> list[str]:
    """The status of every job run recorded."""
    async with engine.connect() as conn:
        return list((await conn.execute(select(JobRun.status))).scalars().all())
