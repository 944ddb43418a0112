"""The test fork server (tests/support/forkserver.py) gives what a subprocess gives: the arguments,
environment and working directory asked for, the exit code, death by a signal, and pipes."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.support import forkserver

pytestmark = pytest.mark.skipif(not forkserver.enabled(), reason="CRAWLHERD_TEST_FORKSERVER=0")


async def test_exit_code_output_environment_and_directory(tmp_path: Path) -> None:
    env = {**os.environ, "CRAWLHERD_DATABASE_URL": f"sqlite:///{tmp_path}/c.db", "PYTHONWARNINGS": ""}
    proc = await forkserver.start("crawlherd", ["db", "upgrade"], env=env, cwd=tmp_path,
                                  stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err
    assert (tmp_path / "c.db").exists()  # the environment's setting, the working directory's file
    proc = await forkserver.start("crawlherd", ["no-such-command"], env=env, cwd=tmp_path,
                                  stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 2 and b"No such command" in err and b"python -m crawlherd" in err, err


async def test_a_signal_ends_the_process_as_it_would_a_subprocess(tmp_path: Path) -> None:
    proc = await forkserver.start("crawlherd", ["demo", "--serve", "--dir", str(tmp_path)], env=dict(os.environ),
                                  cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.pid != os.getpid() and proc.returncode is None
    proc.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL
