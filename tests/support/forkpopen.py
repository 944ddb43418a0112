"""``subprocess.Popen`` for a Python command, forked off the test process's fork server
(:mod:`tests.support.forkserver`): :func:`popen` takes the ``[sys.executable, "-m", MODULE, ...]``,
``[sys.executable, "-c", CODE, ...]`` or ``[sys.executable, SCRIPT, ...]`` a test would give
``subprocess.Popen`` and answers a :class:`ForkedPopen` -- the same process (its own PID, signals, exit
code, descriptors, environment, working directory) without a fresh interpreter's second of imports.

``CRAWLHERD_TEST_FORKSERVER=0``: a real ``subprocess.Popen`` of the same arguments.

Differences from ``subprocess.Popen``, on purpose: ``stdin=None`` gives the child ``/dev/null``, not
this process's stdin (a pytest-xdist worker's); only the keyword arguments below are taken.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeAlias

from . import forkserver

__all__ = ["ForkedPopen", "Process", "popen"]


class ForkedPopen(forkserver.Signals):
    """What a test uses of :class:`subprocess.Popen`, for a process the fork server started: ``args``,
    ``pid``, ``returncode``, ``poll()``, ``wait(timeout)``, ``communicate(input, timeout)``,
    ``send_signal()``, ``terminate()``, ``kill()``, ``stdin`` / ``stdout`` / ``stderr`` when pipes, and
    ``with``."""

    def __init__(self, args: Sequence[str], sock: socket.socket, pid: int,
                 pipes: dict[str, IO[Any]]) -> None:
        self.args = list(args)
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = pipes.get("stdin")
        self.stdout: IO[Any] | None = pipes.get("stdout")
        self.stderr: IO[Any] | None = pipes.get("stderr")
        self._sock = sock
        self._status = b""
        self._io: tuple[list[threading.Thread], dict[str, Any]] | None = None

    def _collect(self, timeout: float | None) -> bool:
        """Read the exit status the server sends; False when it has not come within ``timeout``."""
        if self.returncode is not None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while len(self._status) < 4:
                self._sock.settimeout(None if deadline is None else max(0.0, deadline - time.monotonic()))
                chunk = self._sock.recv(4 - len(self._status))
                if not chunk:
                    raise RuntimeError(f"the fork server went away before process {self.pid} ended")
                self._status += chunk
        except (BlockingIOError, TimeoutError):
            return False
        self._sock.close()
        self.returncode = int.from_bytes(self._status, "big", signed=True)
        return True

    def poll(self) -> int | None:
        self._collect(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._collect(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:  # noqa: A002
        """Write ``input`` to stdin (then close it), read stdout and stderr to their end, wait; on
        ``TimeoutExpired`` a later call goes on where this one stopped, as with ``subprocess``."""
        if self._io is None:
            out: dict[str, Any] = {}
            threads = [threading.Thread(target=self._feed, args=(input,), daemon=True)] if self.stdin else []
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    threads.append(threading.Thread(target=self._drain, args=(name, stream, out), daemon=True))
            for thread in threads:
                thread.start()
            self._io = (threads, out)
        threads, out = self._io
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return out.get("stdout"), out.get("stderr")

    def _feed(self, data: Any) -> None:
        assert self.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            if data:
                self.stdin.write(data)
            self.stdin.close()

    @staticmethod
    def _drain(name: str, stream: IO[Any], out: dict[str, Any]) -> None:
        out[name] = stream.read()
        stream.close()

    def _ended(self) -> bool:
        return self.poll() is not None

    def __enter__(self) -> ForkedPopen:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr, self.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()


#: A process :func:`popen` started: forked, or real under ``CRAWLHERD_TEST_FORKSERVER=0``.
Process: TypeAlias = "subprocess.Popen[Any] | ForkedPopen"


def popen(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    text: bool = False,
    encoding: str | None = None,
    errors: str | None = None,
) -> Process:
    """``subprocess.Popen(argv, ...)`` of a Python command, forked off the server when it is enabled.
    ``stdin`` / ``stdout`` / ``stderr``: None, ``PIPE``, ``DEVNULL``, ``STDOUT`` (stderr only), a file
    descriptor or an object with ``fileno()``; ``text``, ``encoding``, ``errors`` as for ``Popen``."""
    if not forkserver.enabled():
        return subprocess.Popen(argv, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,  # noqa: S603
                                text=text, encoding=encoding, errors=errors)
    request = {**forkserver.target_of(argv), "env": dict(os.environ if env is None else env),
               "cwd": str(cwd or Path.cwd())}
    theirs: list[int] = []  # what the child gets, closed here once sent
    mine: dict[str, int] = {}  # our ends of the pipes

    def fd_for(name: str, spec: Any, default: int) -> int:
        if spec is None:
            if default >= 0:
                return default
            spec = subprocess.DEVNULL
        if spec == subprocess.DEVNULL:
            theirs.append(os.open(os.devnull, os.O_RDONLY if name == "stdin" else os.O_WRONLY))
            return theirs[-1]
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            mine[name], child = (w, r) if name == "stdin" else (r, w)
            theirs.append(child)
            return child
        return spec if isinstance(spec, int) else int(spec.fileno())

    try:
        fds = [fd_for("stdin", stdin, -1), fd_for("stdout", stdout, 1)]
        fds.append(fds[1] if stderr == subprocess.STDOUT else fd_for("stderr", stderr, 2))
        sock, pid = forkserver.send(request, fds)
    except BaseException:
        for fd in mine.values():
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    textual = text or encoding is not None or errors is not None
    pipes: dict[str, IO[Any]] = {}
    for name, fd in mine.items():
        binary: IO[bytes] = open(fd, "wb" if name == "stdin" else "rb")  # noqa: SIM115 - the process owns it
        pipes[name] = (io.TextIOWrapper(binary, encoding=encoding, errors=errors, write_through=name == "stdin")  # type: ignore[arg-type]
                       if textual else binary)
    return ForkedPopen(argv, sock, pid, pipes)
