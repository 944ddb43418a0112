"""A tiny HTTP/1.1 server whose request times are the **kernel's** receive timestamps.

For politeness assertions: the aiohttp test server stamps a request when its event loop gets to it,
which on a loaded machine can be a hundred milliseconds after the bytes arrived -- two requests
that arrived d apart may then be stamped 2 ms apart. Here every socket has ``SO_TIMESTAMPNS`` set
and each request is stamped with the time the kernel received its first packet, whatever the
scheduling of this process. Threads (one per connection) serve ``/page/{n}`` pages that link to
``/page/{2n}`` and ``/page/{2n+1}`` below ``pages``, keep-alive, on as many ports as asked.

For concurrency assertions: ``hold`` seconds are waited before each response is written, and each
request's span -- from its kernel receive time to the end of writing its response -- is in ``spans``;
:func:`max_overlap` is the most requests the server had in hand at once.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Span", "Stamp", "TimestampingServer", "max_overlap"]

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS


@dataclass(frozen=True, slots=True)
class Stamp:
    at: float  # kernel receive time (CLOCK_REALTIME, seconds)
    port: int
    path: str


@dataclass(frozen=True, slots=True)
class Span:
    start: float  # kernel receive time (CLOCK_REALTIME, seconds)
    end: float  # the response written (CLOCK_REALTIME)
    path: str


def max_overlap(spans: Iterable[Span]) -> int:
    """The most spans open at one instant (a span ending when another starts does not overlap it)."""
    events = sorted([(s.start, 1) for s in spans] + [(s.end, -1) for s in spans])  # ends first on ties
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


class TimestampingServer:
    def __init__(
        self, *, ports: int = 1, pages: int = 1000, robots_txt: str | None = None, hold: float = 0.0
    ) -> None:
        self.pages = pages
        self.robots_txt = robots_txt
        self.hold = hold
        self.stamps: list[Stamp] = []
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        self._listeners: list[socket.socket] = []
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        for _ in range(ports):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            self._listeners.append(s)
        self.ports = [s.getsockname()[1] for s in self._listeners]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def __enter__(self) -> TimestampingServer:
        for s in self._listeners:
            self._spawn(self._accept, s)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        for s in self._listeners:
            s.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        for t in self._threads:
            t.join(5)

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept(self, listener: socket.socket) -> None:
        port = listener.getsockname()[1]
        listener.settimeout(0.2)
        while not self._closing.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            with self._lock:
                self._conns.append(conn)
            self._spawn(self._serve, conn, port)

    def _serve(self, conn: socket.socket, port: int) -> None:
        cmsg_space = socket.CMSG_SPACE(struct.calcsize("qq"))
        buf = b""
        stamp = 0.0
        try:
            while not self._closing.is_set():
                data, ancdata, _, _ = conn.recvmsg(65536, cmsg_space)
                if not data:
                    return
                for level, kind, payload in ancdata:
                    if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and not buf:
                        sec, nsec = struct.unpack("qq", payload[: struct.calcsize("qq")])
                        stamp = sec + nsec / 1e9
                buf += data
                while b"\r\n\r\n" in buf:
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    path = head.split(b" ", 2)[1].decode()
                    with self._lock:
                        self.stamps.append(Stamp(stamp, port, path))
                    response = self._response(path)
                    if self.hold:
                        time.sleep(self.hold)
                    # the span ends as the answer goes out: a client cannot have it sooner, and a clock read
                    # after sendall() may come late (this thread descheduled meanwhile on a busy machine)
                    end = time.time()
                    conn.sendall(response)
                    with self._lock:
                        self.spans.append(Span(stamp, end, path))
        except OSError:
            return

    def _response(self, path: str) -> bytes:
        body = b"not found"
        status = b"404 Not Found"
        ctype = b"text/html"
        if path == "/robots.txt" and self.robots_txt is not None:
            body, status, ctype = self.robots_txt.encode(), b"200 OK", b"text/plain"
        elif path.startswith("/page/") and path[6:].isdigit():
            n = int(path[6:])
            links = "".join(f'<a href="/page/{c}">p{c}</a>' for c in (2 * n, 2 * n + 1) if c < self.pages)
            body = f"<html><body>page {n} {links}</body></html>".encode()
            status = b"200 OK"
        return (
            b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body
        )
