"""`crawlherd demo` and `crawlherd run` serve the console and print its URL; `demo --serve` keeps it up
after the demo until Ctrl+C, plain `demo` exits by itself. Each runs as a process of its own (forked
off the fork server, one with a fresh interpreter); the test reads the URL it prints, fetches console
pages and sends SIGINT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import forkpopen

pytestmark = pytest.mark.timeout(300)

URL = re.compile(r"console: (http://127\.0\.0\.1:\d+/)")


def _start(*args: str, cwd: Path, fresh: bool = False) -> forkpopen.Process:
    """``python -m crawlherd ARGS``, forked off the fork server (tests/support/forkpopen.py) unless
    ``fresh``: then a real interpreter starts, as a user's does."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    start = subprocess.Popen if fresh else forkpopen.popen
    return start(  # type: ignore[no-any-return,operator]
        [sys.executable, "-m", "crawlherd", *args], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def _end(proc: forkpopen.Process) -> None:
    """Kill ``proc`` if it still runs (a failed test) and close its pipe."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _lines(proc: forkpopen.Process) -> Iterator[str]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield line.rstrip("\n")


def _until(lines: Iterator[str], pattern: str, seen: list[str]) -> re.Match[str]:
    for line in lines:
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"no line matched {pattern!r}:\n" + "\n".join(seen))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - a loopback URL the test read
        assert response.status == 200
        return str(response.read().decode("utf-8"))


@pytest.mark.slow
def test_demo_serve_keeps_the_console_up_until_ctrl_c(tmp_path: Path) -> None:
    proc = _start("demo", "--dir", "d", "--no-browser", "--console-port", "0", "--serve", cwd=tmp_path)
    seen: list[str] = []
    try:
        lines = _lines(proc)
        url = _until(lines, URL.pattern, seen).group(1)
        assert "crawlherd" in _get(url)  # up while the demo runs (and, with --serve, after it)
        _until(lines, r"the console stays up at " + re.escape(url), seen)
        assert any("ok" in line for line in seen) and not any("MISMATCH" in line for line in seen), seen
        jobs = _get(url + "jobs")
        assert "succeeded" in jobs and "st-dead" not in jobs
        assert "demo-jobs" in _get(url + "items")
        assert proc.poll() is None  # still serving
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, "\n".join(seen + list(lines))
        with pytest.raises(urllib.error.URLError):
            _get(url)
    finally:
        _end(proc)


@pytest.mark.slow
def test_plain_demo_prints_the_console_and_exits_by_itself(tmp_path: Path) -> None:
    proc = _start("demo", "--dir", "d", "--no-browser", "--console-port", "0", cwd=tmp_path)
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        _end(proc)
    assert proc.returncode == 0, out
    assert "ok" in out and "MISMATCH" not in out and "items are in" in out, out  # the report for people
    found = URL.search(out)
    assert found, out
    assert "stays up" not in out
    with pytest.raises(urllib.error.URLError):  # the console went with the demo
        _get(found.group(1))


def test_demo_refuses_serve_without_a_console(tmp_path: Path) -> None:
    # A fresh interpreter: `python -m crawlherd` itself, imports and all, as a user starts it.
    proc = _start("demo", "--no-console", "--serve", cwd=tmp_path, fresh=True)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        _end(proc)
    assert proc.returncode == 2 and "--serve keeps the console up" in out


def test_run_serves_the_console_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'run.db'}"
    proc = _start("run", "--database-url", db, "--console-port", "0", "--frontier-url", "memory://", cwd=tmp_path)
    seen: list[str] = []
    try:
        lines = _lines(proc)
        url = _until(lines, URL.pattern, seen).group(1)
        assert "Overview" in _get(url) and "Targets" in _get(url + "targets")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, "\n".join(seen + list(lines))
    finally:
        _end(proc)
