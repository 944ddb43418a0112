"""The ``crawlherd`` command as a user runs it: a real subprocess, stdout and stderr pipes (not a terminal);
what it prints (status lines, the statistics dump), and a demo pipeline to run it on (``demo_pipeline``,
offered to every integration test by ``tests/integration/conftest.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlherd.demo import DemoSite
from crawlherd.demo.targets import expected_results

from . import forkserver

__all__ = ["WORKER_STATUS", "crawlherd", "demo_pipeline", "dumped", "invoke", "running_crawlherd",
           "start_crawlherd", "worker_status_until_done"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: A status line of ``crawlherd worker`` off a terminal: group 1 the items, group 2 the jobs done.
WORKER_STATUS = re.compile(
    r"\d\d:\d\d:\d\d pages \d+ \(\d+\.\d/min\), items (\d+) \(\d+\.\d/min\); "
    r"jobs (\d+) done, \d+ running, \d+ retried, \d+ dead"
)


async def start_crawlherd(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> asyncio.subprocess.Process | forkserver.ForkedProcess:
    """``python -m crawlherd ARGS`` started with piped stdout and stderr, the caller's environment
    plus ``env`` (forked off the test process's fork server, :mod:`tests.support.forkserver`)."""
    if forkserver.enabled():
        return await forkserver.start("crawlherd", args, env={**os.environ, **(env or {})}, cwd=cwd or Path.cwd(),
                                      stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
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


async def invoke(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    """``crawlherd ARGS`` run in this process -- for the commands where a process of their own proves
    nothing more (setting up a config DB, importing targets, a one-shot read) and its start-up would only
    cost a second: click's ``CliRunner`` in a thread (the command runs its own event loop, the test's goes
    on), ``env`` over the environment and ``cwd`` as the working directory for its duration. (exit code,
    stdout, stderr); log records go to pytest's capture, not to this stderr. An exception the command
    did not turn into an exit code is raised here."""
    from click.testing import CliRunner

    from crawlherd.cli import main

    def run() -> tuple[int, str, str]:
        with contextlib.chdir(cwd or Path.cwd()):
            result = CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return await asyncio.to_thread(run)


@contextlib.asynccontextmanager
async def running_crawlherd(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[asyncio.subprocess.Process | forkserver.ForkedProcess]:
    """:func:`start_crawlherd` for a long-running command; killed (by its PID) if it still runs at the
    end of the block, e.g. after a failed assertion."""
    proc = await start_crawlherd(*args, env=env, cwd=cwd)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def dumped(err: str, title: str) -> dict[str, Any]:
    """The statistics that follow ``title:`` on stderr: off a terminal, one JSON object on that line."""
    stats: dict[str, Any] = json.loads(err.split(f"{title}: ", 1)[1].split("\n", 1)[0])
    return stats


async def worker_status_until_done(stderr: asyncio.StreamReader, jobs: int) -> int:
    """Read ``crawlherd worker``'s status lines (every line must be one) until ``jobs`` jobs are done;
    the items stored by then."""
    while True:
        line = (await asyncio.wait_for(stderr.readline(), 60)).decode().rstrip("\n")
        status = WORKER_STATUS.fullmatch(line)
        assert status, line
        if status.group(2) == str(jobs):
            return int(status.group(1))


@pytest.fixture
async def demo_pipeline(tmp_path: Path) -> AsyncIterator[tuple[DemoSite, dict[str, str], int]]:
    """A demo site, and a fresh config DB (in the environment returned) holding examples/targets.yaml
    with every target run now; the number of items the site lists for those targets."""
    async with DemoSite(throttle_every=0) as site:
        env = {"DEMO_URL": site.url, "CRAWLHERD_DATABASE_URL": f"sqlite:///{tmp_path}/c.db",
               "CRAWLHERD_STATUS_INTERVAL": "0.1"}
        assert (await invoke("targets", "import", str(EXAMPLES / "targets.yaml"), env=env))[0] == 0
        code, out, err = await invoke("targets", "run", "1", "2", env=env)
        assert code == 0, err
        text = (EXAMPLES / "targets.yaml").read_text().replace("${DEMO_URL:-http://127.0.0.1:8080}", site.url)
        expected = expected_results(site, yaml.safe_load(text))
        yield site, env, sum(len(v) for v in expected.values())
