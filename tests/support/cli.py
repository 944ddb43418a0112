"""The ``crawlherd`` command as a user runs it: a real subprocess, stdout and stderr pipes (not a terminal)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["crawlherd", "running_crawlherd", "start_crawlherd"]


async def start_crawlherd(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> asyncio.subprocess.Process:
    """``python -m crawlherd ARGS`` started with piped stdout and stderr, the caller's environment
    plus ``env``."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawlherd", *args, cwd=cwd,
        env={**os.environ, **(env or {})}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def crawlherd(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 90
) -> tuple[int, str, str]:
    """Run ``crawlherd ARGS`` to its end: (exit code, stdout, stderr)."""
    proc = await start_crawlherd(*args, env=env, cwd=cwd)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def running_crawlherd(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """:func:`start_crawlherd` for a long-running command; killed (by its PID) if it still runs at the
    end of the block, e.g. after a failed assertion."""
    proc = await start_crawlherd(*args, env=env, cwd=cwd)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
