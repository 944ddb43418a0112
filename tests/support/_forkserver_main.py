"""The fork server of :mod:`tests.support.forkserver`: ``python -m tests.support._forkserver_main SOCKET``.

Imports crawlherd's command modules once, then forks a child for each request on ``SOCKET`` and
reports the child's PID at once and its exit code (negative: the signal that ended it) when it ends.
It starts no thread and no event loop, so a child begins as a fresh interpreter would, with crawlherd
imported already.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import random
import runpy
import selectors
import signal
import socket
import struct
import sys
import traceback
import types
import warnings

_STATUS = struct.Struct("!i")
#: The filter of the server's ``PYTHONWARNINGS=default`` (ResourceWarnings shown while it imports).
SERVER_FILTER = ("default", None, Warning, None, 0)
#: Signals held from fork until the child has reset its handlers.
HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD}


def preload() -> None:
    """What ``crawlherd worker``, ``dispatch``, ``run``, ``crawl`` and ``python -m crawlherd.demo`` import
    anyway, and the test modules some of the processes the tests start run on top (imported only: nothing
    registered); console passwords hashed as in the test process (:mod:`tests.support.passwords`)."""
    from crawlherd.cli import COMMANDS

    for target in COMMANDS.values():
        importlib.import_module(target.split(":", 1)[0])
    for name in ("crawlherd.worker.worker", "crawlherd.dispatch.dispatch_service", "crawlherd.brokers.redis",
                 "crawlherd.brokers.amqp", "crawlherd.brokers.sqlite", "crawlherd.frontier.redis",
                 "crawlherd.frontier.sqlite", "crawlherd.fetch.http", "sqlalchemy.dialects.postgresql.asyncpg",
                 "sqlalchemy.dialects.sqlite.aiosqlite", "asyncpg", "aiosqlite", "uvloop", "crawlherd.demo",
                 # what tests.support.run_dispatch (run as __main__ by the dispatcher-process tests) imports
                 "tests.support.table_broker", "tests.support.real_brokers"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from tests.support.passwords import cheap_password_hashes

    cheap_password_hashes()


def fresh_stdio(env: dict[str, str]) -> None:
    """``sys.stdin`` / ``stdout`` / ``stderr`` on the child's descriptors 0, 1, 2, buffered as a fresh
    interpreter buffers them: stdout line-buffered on a terminal, ``PYTHONUNBUFFERED`` honoured, stderr
    line-buffered (the server's streams were set up for its own descriptors and environment)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        buffered: io.BufferedIOBase = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors,
                                  line_buffering=fd == 2 or (fd == 1 and os.isatty(fd)),
                                  write_through=unbuffered and fd > 0)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def run(request: dict[str, object]) -> None:
    """Run what the request names as ``__main__``, as ``python -m MODULE ARGS`` (``module``),
    ``python PATH ARGS`` (``path``) or ``python -c CODE ARGS`` (``code``) would; ``argv0``, when given,
    is ``sys.argv[0]`` (a console script's path)."""
    args = request["args"]
    assert isinstance(args, list)
    argv0 = request.get("argv0")
    if "module" in request:
        module = str(request["module"])
        sys.argv = [str(argv0 or module), *map(str, args)]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    elif "path" in request:
        path = os.path.abspath(str(request["path"]))
        sys.argv = [str(argv0 or request["path"]), *map(str, args)]
        sys.path.insert(0, os.path.dirname(path))
        runpy.run_path(path, run_name="__main__")
    else:
        sys.argv = [str(argv0 or "-c"), *map(str, args)]
        sys.path.insert(0, "")
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(str(request["code"]), "<string>", "exec"), main.__dict__)  # noqa: S102 - the caller's -c


def child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become ``python -m MODULE ARGS``; never returns."""
    code = 1
    try:
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        ignored = request.get("ignore", [])
        assert isinstance(ignored, list)
        for sig in ignored:  # what its parent had ignored (a shell's background job: SIGINT)
            signal.signal(sig, signal.SIG_IGN)
        signal.set_wakeup_fd(-1)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(str(request["cwd"]))
        for path in reversed([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]):
            if path not in sys.path:
                sys.path.insert(0, path)
        # the server's own "-W default" out, the child's PYTHONWARNINGS in, as a fresh interpreter has them
        warnings.filters[:] = [f for f in warnings.filters if f != SERVER_FILTER]
        warnings._filters_mutated()  # type: ignore[attr-defined]
        sys.warnoptions[:] = [w for w in env.get("PYTHONWARNINGS", "").split(",") if w]
        warnings._processoptions(sys.warnoptions)  # type: ignore[attr-defined]
        random.seed()
        fresh_stdio(env)
        try:
            run(request)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            code = -signal.SIGINT  # an interpreter ends by the signal then (below), as Ctrl+C ended it
        except BaseException:
            traceback.print_exc()
            code = 1
        import atexit

        atexit._run_exitfuncs()  # type: ignore[attr-defined]
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        if code == -signal.SIGINT:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)  # the client waits for the name: it appears listening
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)  # the child resets it; wake_w stays open there, harmless
    signal.signal(signal.SIGCHLD, lambda *_: None)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    waiting: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    try:
        loop(listener, sel, wake_r, waiting, stopping)
    finally:
        listener.close()


def loop(listener: socket.socket, sel: selectors.BaseSelector, wake_r: int, waiting: dict[int, socket.socket],
         stopping: list[bool]) -> None:
    while not stopping:
        for key, _ in sel.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                head, fds, _, _ = socket.recv_fds(conn, 4, 3)
                (size,) = struct.unpack("!I", head)
                body = b""
                while len(body) < size:
                    body += conn.recv(size - len(body))
                request = json.loads(body)
                sys.stdout.flush()
                sys.stderr.flush()
                # Held until the child has its own handlers: a SIGTERM sent as soon as its PID is known
                # must not run the server's handler in the child (and be lost there).
                signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    for other in waiting.values():
                        other.close()
                    os.close(wake_r)
                    child(request, fds)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
                for fd in fds:
                    os.close(fd)
                conn.sendall(_STATUS.pack(pid))
                waiting[pid] = conn
            else:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status)))
                conn.close()


def main() -> None:
    preload()
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
