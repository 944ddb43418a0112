"""The test fork server (tests/support/forkserver.py) gives what a subprocess gives: the arguments,
environment and working directory asked for, the exit code, death by a signal, and pipes -- to the
asyncio callers, to :func:`tests.support.forkpopen.popen`'s, and to a shell running the ``crawlherd``
shim (tests/support/_forkserver_shim.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import forkpopen, forkserver

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


def test_popen_gives_what_subprocess_popen_gives(tmp_path: Path) -> None:
    code = ("import os, sys; print(sys.argv[1:], os.getcwd(), os.environ['X']); print(input(), file=sys.stderr); "
            "sys.exit(3)")
    proc = forkpopen.popen([sys.executable, "-c", code, "a", "b"], env={**os.environ, "X": "x"}, cwd=tmp_path,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert isinstance(proc, forkpopen.ForkedPopen) and proc.pid != os.getpid()
    out, err = proc.communicate("from stdin\n", timeout=60)
    assert (proc.returncode, out, err) == (3, f"['a', 'b'] {tmp_path} x\n", "from stdin\n")


def test_popen_waits_with_a_timeout_and_ends_by_a_signal() -> None:
    proc = forkpopen.popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    with proc:
        assert proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.2)  # it reads a pipe nobody writes to: it cannot have ended
        proc.terminate()
        assert proc.wait(timeout=60) == -signal.SIGTERM
    assert proc.stdin is not None and proc.stdin.closed


def _shell(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{forkserver.shim_dir()}{os.pathsep}{os.environ['PATH']}",
           "CRAWLHERD_DATABASE_URL": f"sqlite:///{tmp_path}/c.db"}
    return subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_shim_runs_the_console_script_with_stdin_arguments_and_exit_code(tmp_path: Path) -> None:
    done = _shell("""
        test "$(command -v crawlherd)" != "$(dirname "$(command -v python)")/crawlherd"
        crawlherd db upgrade -q
        crawlherd users add ops --password-stdin <<< 'a long passphrase'
        if crawlherd users add nopass --password-stdin < /dev/null; then exit 9; fi
        crawlherd users list --json
        crawlherd no-such-command || echo "exit $?"
    """, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ops" in done.stdout and "nopass" not in done.stdout.partition("saved")[2], done.stdout
    assert "exit 2" in done.stdout and "Usage: crawlherd " in done.stderr, done.stderr  # its name: crawlherd


def test_the_shim_forwards_signals_and_ends_as_the_child_did(tmp_path: Path) -> None:
    env = {**os.environ, "CRAWLHERD_DATABASE_URL": f"sqlite:///{tmp_path}/c.db"}
    shim = str(forkserver.shim_dir() / "crawlherd")
    assert subprocess.run([shim, "db", "upgrade"], env=env, capture_output=True, timeout=120).returncode == 0
    # the child handles SIGTERM (a clean stop, exit 0): the shim passed the signal on and exits with its code
    web = subprocess.Popen([shim, "web", "--port", "0", "--metrics-port", "0"], env=env, stderr=subprocess.PIPE,
                           stdout=subprocess.DEVNULL, text=True)
    with web:
        assert web.stderr is not None
        for line in web.stderr:
            if "metrics: http://" in line:
                break
        web.send_signal(signal.SIGTERM)
        assert web.wait(timeout=60) == 0
    # the child dies by SIGTERM (reading its stdin): so does the shim, and the child is gone with it
    add = subprocess.Popen([shim, "users", "add", "x", "--password-stdin"], env=env, stdin=subprocess.PIPE)
    with add:
        add.send_signal(signal.SIGTERM)
        assert add.wait(timeout=60) == -signal.SIGTERM
        assert add.stdin is not None
        with pytest.raises(BrokenPipeError):  # nobody reads the pipe any more: the child ended too
            os.write(add.stdin.fileno(), b"password\n")
