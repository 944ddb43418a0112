"""``crawlherd`` for a shell a test runs (:func:`tests.support.forkserver.shim_dir` puts it first on
its ``PATH``, this file with the server's socket filled in and ``#!PYTHON -IS`` on top): runs the
console script ``crawlherd`` forked off the test process's fork server instead of a fresh interpreter
importing crawlherd (about 2 CPU-seconds each).

What the command gets is what the console script would: this process's arguments (``sys.argv[0]``,
this path, names the program ``crawlherd``), environment, working directory and descriptors 0, 1, 2
(stdin included: ``crawlherd ... <<< text`` reads it). SIGINT, SIGTERM and SIGHUP sent here go to the
child; this process ends as the child did: its exit code, or killed by the same signal.

Only the standard library's socket, struct, json, os, signal and sys: it starts in a few hundredths of
a CPU-second (``python -I -S``: no site, no user environment).
"""

import json
import os
import signal
import socket
import struct
import sys

SOCKET = ""  # the server's socket, filled in by shim_dir()
CONSOLE_SCRIPT = "import sys\nfrom crawlherd.cli import main\nsys.exit(main())\n"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STATUS = struct.Struct("!i")


def receive(sock: socket.socket) -> int:
    data = b""
    while len(data) < STATUS.size:
        chunk = sock.recv(STATUS.size - len(data))  # a signal handler runs, then the call goes on
        if not chunk:
            sys.stderr.write("crawlherd (test shim): the fork server went away\n")
            sys.exit(127)
        data += chunk
    value: int = STATUS.unpack(data)[0]
    return value


def main() -> None:
    child: list[int] = []
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child:
            try:  # noqa: SIM105 - contextlib would cost the shim an import
                os.kill(child[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)

    ignored = [int(sig) for sig in FORWARDED if signal.getsignal(sig) == signal.SIG_IGN]
    for sig in FORWARDED:
        if sig not in ignored:  # what the shell has us ignore (a background job's SIGINT), the child too
            signal.signal(sig, forward)
    request = {"code": CONSOLE_SCRIPT, "argv0": sys.argv[0], "args": sys.argv[1:], "env": dict(os.environ),
               "cwd": os.getcwd(), "ignore": ignored}
    body = json.dumps(request).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(SOCKET)
    except OSError as exc:
        sys.stderr.write(f"crawlherd (test shim): no fork server at {SOCKET}: {exc}\n")
        sys.exit(127)
    socket.send_fds(sock, [struct.pack("!I", len(body)) + body], [0, 1, 2])
    child.append(receive(sock))
    for signum in pending:
        forward(signum, None)
    code = receive(sock)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
