"""``python -m crawlherd ARGS`` as a real process of its own, started by forking a server that has
crawlherd imported already: the same process a test would get from ``subprocess`` -- its own PID,
signals, exit code, file descriptors, environment and working directory -- without paying the
interpreter's second of imports (SQLAlchemy, pydantic, aiohttp ...) for each of the ~150 processes
the suite starts.

One server per test process (pytest-xdist worker), started on first use and ended by its PID at exit:
``python -m tests.support._forkserver_main SOCKET``. A request carries the arguments, the environment
and the working directory, and passes stdin, stdout and stderr as file descriptors (``SCM_RIGHTS``);
the server forks, and the child resets what a fresh interpreter would have (signal handlers, the
warning filters of ``PYTHONWARNINGS``, the random seed, ``sys.path`` from ``PYTHONPATH``) and runs the
module as ``__main__``. The server answers the child's PID at once and its exit status when it ends.

Besides ``python -m MODULE`` (:func:`start`, :func:`exec_crawlherd`), the server runs ``python -c CODE``
and ``python SCRIPT`` (:func:`exec_python`; :func:`tests.support.forkpopen.popen` for
``subprocess.Popen`` callers), and the ``crawlherd`` console script for shells through a shim
(:func:`shim_dir`).

``CRAWLHERD_TEST_FORKSERVER=0`` starts every process with ``subprocess`` instead (what a user runs;
slower).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ForkedProcess", "Signals", "enabled", "exec_crawlherd", "exec_python", "send", "shim_dir", "start",
           "target_of"]

ROOT = Path(__file__).resolve().parents[2]
_STATUS = struct.Struct("!i")


def enabled() -> bool:
    return os.environ.get("CRAWLHERD_TEST_FORKSERVER", "1") != "0"


class _Server:
    """The fork server of this test process."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="crawlherd-fork-")
        self.path = os.path.join(self.dir, "s")
        env = {**os.environ, "PYTHONWARNINGS": "default"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support._forkserver_main", self.path],
            stdin=subprocess.DEVNULL, env=env, cwd=ROOT,
        )
        deadline = time.monotonic() + 120
        while not os.path.exists(self.path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the fork server exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("the fork server did not listen within 120 s")
            time.sleep(0.02)
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


_server: _Server | None = None
_lock = threading.Lock()


def _the_server() -> _Server:
    global _server
    with _lock:
        if _server is None or _server.proc.poll() is not None:
            _server = _Server()
        return _server


def send(request: Mapping[str, object], fds: Sequence[int], server: _Server | None = None) -> tuple[socket.socket, int]:
    """Ask the server (this process's, started when missing) to fork a child for ``request`` (a module,
    path or code to run, ``args``, ``env``, ``cwd``; see ``_forkserver_main.run``) with ``fds`` as its
    descriptors 0, 1, 2 (the caller still closes its own); the socket that answers the child's exit
    status, and the child's PID."""
    server = server or _the_server()
    body = json.dumps(request).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(server.path)
        socket.send_fds(sock, [struct.pack("!I", len(body)) + body], list(fds))
        data = b""
        while len(data) < _STATUS.size:
            chunk = sock.recv(_STATUS.size - len(data))
            if not chunk:
                raise RuntimeError("the fork server did not start the process")
            data += chunk
    except BaseException:
        sock.close()
        raise
    pid: int = _STATUS.unpack(data)[0]
    return sock, pid


def shim_dir() -> Path:
    """A directory holding ``crawlherd``: an executable that runs the console script forked off this
    process's server, for the ``crawlherd`` commands a shell runs (``tests/support/_forkserver_shim.py``).
    Put it first on a child's ``PATH``."""
    server = _the_server()
    bin_dir = Path(server.dir) / "bin"
    shim = bin_dir / "crawlherd"
    if not shim.exists():
        bin_dir.mkdir(exist_ok=True)
        text = (ROOT / "tests" / "support" / "_forkserver_shim.py").read_text(encoding="utf-8")
        text = text.replace('SOCKET = ""', f"SOCKET = {server.path!r}", 1)
        tmp = bin_dir / f".crawlherd.{threading.get_ident()}"
        tmp.write_text(f"#!{sys.executable} -IS\n{text}", encoding="utf-8")
        tmp.chmod(0o755)
        tmp.rename(shim)  # whole or not at all: two threads may write it at once
    return bin_dir


class Signals:
    """``send_signal()``, ``terminate()`` and ``kill()`` of a forked process, by its PID, until it ended."""

    pid: int

    def _ended(self) -> bool:
        raise NotImplementedError

    def send_signal(self, sig: int) -> None:
        if not self._ended():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkedProcess(Signals):
    """What a test uses of :class:`asyncio.subprocess.Process`, for a process the fork server started:
    ``pid``, ``returncode``, ``wait()``, ``communicate()``, ``send_signal()``, ``terminate()``,
    ``kill()``, and ``stdout`` / ``stderr`` readers when they were pipes."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self._sock = sock
        self.pid = pid
        self.returncode: int | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._waiter: asyncio.Future[int] | None = None

    async def wait(self) -> int:
        if self.returncode is None:
            if self._waiter is None:
                self._waiter = asyncio.ensure_future(self._read_status())
            self.returncode = await asyncio.shield(self._waiter)
        return self.returncode

    async def _read_status(self) -> int:
        loop = asyncio.get_running_loop()
        data = b""
        while len(data) < _STATUS.size:
            chunk = await loop.sock_recv(self._sock, _STATUS.size - len(data))
            if not chunk:
                raise RuntimeError(f"the fork server went away before process {self.pid} ended")
            data += chunk
        self._sock.close()
        code: int = _STATUS.unpack(data)[0]
        return code

    async def communicate(self) -> tuple[bytes, bytes]:
        async def read(stream: asyncio.StreamReader | None) -> bytes:
            return await stream.read() if stream is not None else b""

        out, err = await asyncio.gather(read(self.stdout), read(self.stderr))
        await self.wait()
        return out, err

    def _ended(self) -> bool:
        return self.returncode is not None


async def start(
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | str,
    stdout: int | None = None,
    stderr: int | None = None,
) -> ForkedProcess:
    """``python -m MODULE ARGS`` forked off the server. ``stdout`` / ``stderr``: a file descriptor to
    write to (duplicated: the caller keeps its own), ``asyncio.subprocess.PIPE`` for a reader on the
    process (``stderr=asyncio.subprocess.STDOUT``: where stdout goes), None for this process's own."""
    return await _start({"module": module, "args": list(args)}, env=env, cwd=cwd, stdout=stdout, stderr=stderr)


async def _start(target: Mapping[str, object], *, env: Mapping[str, str], cwd: Path | str, stdout: int | None,
                 stderr: int | None) -> ForkedProcess:
    server = await asyncio.to_thread(_the_server)
    loop = asyncio.get_running_loop()
    mine: list[int] = []  # our ends of the pipes
    theirs: list[int] = []  # what the child gets, closed here once sent
    readers: dict[str, int] = {}

    def fd_for(name: str, spec: int | None, default: int) -> int:
        if spec == asyncio.subprocess.PIPE:
            r, w = os.pipe()
            mine.append(r)
            theirs.append(w)
            readers[name] = r
            return w
        if spec is None:
            return default
        return spec

    null = os.open(os.devnull, os.O_RDONLY)
    theirs.append(null)
    out_fd = fd_for("stdout", stdout, 1)
    err_fd = out_fd if stderr == asyncio.subprocess.STDOUT else fd_for("stderr", stderr, 2)
    try:
        sock, pid = send({**target, "env": dict(env), "cwd": str(cwd)}, [null, out_fd, err_fd], server)
    except BaseException:
        for fd in mine:
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    sock.setblocking(False)
    proc = ForkedProcess(sock, pid)
    for name, fd in readers.items():
        reader = asyncio.StreamReader(limit=2**20)
        await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r),  # type: ignore[misc]
                                     os.fdopen(fd, "rb", buffering=0))
        setattr(proc, name, reader)
    return proc


def target_of(argv: Sequence[str]) -> dict[str, object]:
    """What the server runs for a command line ``[sys.executable, "-m", MODULE, ...]``,
    ``[sys.executable, "-c", CODE, ...]`` or ``[sys.executable, SCRIPT, ...]``: ``module``, ``code`` or
    ``path``, and ``args``; ValueError for any other (an option the server would not honour)."""
    exe, *rest = argv
    if exe == sys.executable and rest:
        if rest[0] == "-m" and len(rest) > 1:
            return {"module": rest[1], "args": rest[2:]}
        if rest[0] == "-c" and len(rest) > 1:
            return {"code": rest[1], "args": rest[2:]}
        if not rest[0].startswith("-"):
            return {"path": rest[0], "args": rest[1:]}
    raise ValueError(f"not a command the fork server runs (sys.executable -m / -c / SCRIPT): {list(argv)}")


async def exec_crawlherd(*args: str, **options: Any) -> ForkedProcess | asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec(sys.executable, "-m", "crawlherd", *args, ...)``; ``options``:
    those of :func:`exec_python`."""
    return await exec_python(sys.executable, "-m", "crawlherd", *args, **options)


async def exec_python(
    *argv: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: int | None = None,
    stdout: Any = None,
    stderr: Any = None,
) -> ForkedProcess | asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec(*argv, ...)`` of a Python command (:func:`target_of`) -- forked
    off the server when it is enabled. ``stdin``: None or ``DEVNULL`` (a forked process reads nothing);
    ``stdout`` / ``stderr``: None, ``PIPE``, ``DEVNULL``, ``STDOUT`` (stderr only), a file descriptor or
    an object with ``fileno()`` -- what ``create_subprocess_exec`` takes."""
    if not enabled():
        return await asyncio.create_subprocess_exec(
            *argv, env=None if env is None else dict(env), cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
        )
    target = target_of(argv)
    if stdin not in (None, asyncio.subprocess.DEVNULL):
        raise ValueError("a forked process reads nothing: stdin must be None or DEVNULL")
    opened: list[int] = []

    def fd(spec: Any) -> int | None:
        if spec is None or spec in (asyncio.subprocess.PIPE, asyncio.subprocess.STDOUT):
            return spec  # type: ignore[no-any-return]
        if spec == asyncio.subprocess.DEVNULL:
            opened.append(os.open(os.devnull, os.O_WRONLY))
            return opened[-1]
        return spec if isinstance(spec, int) else int(spec.fileno())

    try:
        return await _start(target, env=os.environ if env is None else env, cwd=cwd or Path.cwd(),
                            stdout=fd(stdout), stderr=fd(stderr))
    finally:
        for f in opened:
            os.close(f)
