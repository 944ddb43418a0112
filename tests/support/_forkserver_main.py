"""The fork server of :mod:`tests.support.forkserver`: ``python -m tests.support._forkserver_main SOCKET``.

Imports crawlherd's command modules once, then forks a child for each request on ``SOCKET`` and
reports the child's PID at once and its exit code (negative: the signal that ended it) when it ends.
It starts no thread and no event loop, so a child begins as a fresh interpreter would, with crawlherd
imported already.
"""

from __future__ import annotations

import contextlib
import importlib
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
import warnings

_STATUS = struct.Struct("!i")
#: The filter of the server's ``PYTHONWARNINGS=default`` (ResourceWarnings shown while it imports).
SERVER_FILTER = ("default", None, Warning, None, 0)


def preload() -> None:
    """What ``crawlherd worker``, ``dispatch``, ``run`` and ``crawl`` import anyway; console passwords
    hashed as in the test process (:mod:`tests.support.passwords`)."""
    from crawlherd.cli import COMMANDS

    for target in COMMANDS.values():
        importlib.import_module(target.split(":", 1)[0])
    for name in ("crawlherd.worker.worker", "crawlherd.dispatch.dispatch_service", "crawlherd.brokers.redis",
                 "crawlherd.brokers.amqp", "crawlherd.brokers.sqlite", "crawlherd.frontier.redis",
                 "crawlherd.frontier.sqlite", "crawlherd.fetch.http", "sqlalchemy.dialects.postgresql.asyncpg",
                 "sqlalchemy.dialects.sqlite.aiosqlite", "asyncpg", "aiosqlite", "uvloop"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from tests.support.passwords import cheap_password_hashes

    cheap_password_hashes()


def child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become ``python -m MODULE ARGS``; never returns."""
    code = 1
    try:
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.set_wakeup_fd(-1)
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
        module = str(request["module"])
        args = request["args"]
        assert isinstance(args, list)
        sys.argv = [module, *map(str, args)]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
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
            code = 130
        except BaseException:
            traceback.print_exc()
            code = 1
        import atexit

        atexit._run_exitfuncs()  # type: ignore[attr-defined]
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
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
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    for other in waiting.values():
                        other.close()
                    os.close(wake_r)
                    child(request, fds)
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
