"""The ``crawlherd`` command as a user runs it: a real subprocess, stdout and stderr pipes (not a terminal)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

__all__ = ["crawlherd", "start_crawlherd"]


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
