"""Forward proxies on loopback for the demo, the docs and the tests: an HTTP proxy (absolute-URI requests
and CONNECT) and a SOCKS5 proxy (no auth, or username/password).

Each connects to the site from its own source address (``127.0.0.N``), so a site tells the proxies apart
by the client address (``request.remote``; the demo site's ``/ip`` page shows it) -- through a CONNECT
tunnel too. ``auth`` ("user:password") makes the proxy demand credentials (``Proxy-Authorization:
Basic`` for HTTP, RFC 1929 for SOCKS5). ``seen`` counts the requests (or tunnels) the proxy carried and
``requests`` lists them: the request line (``CONNECT host:port HTTP/1.1``, ``GET http://... HTTP/1.1``, or
``SOCKS5 CONNECT host:port``) and the ``Proxy-Authorization`` it was shown (None for SOCKS5).

    proxy = await start_http_proxy("127.0.0.2", auth="user:pass")
    try:
        ...  # fetch through proxy.url ("http://user:pass@127.0.0.1:<port>")
    finally:
        await proxy.close()

or ``async with await start_http_proxy() as proxy: ...``. Loopback only; not a proxy to put on a network.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from crawlherd._aio import AsyncClosing, pipe

__all__ = ["LoopbackProxy", "start_http_proxy", "start_socks5_proxy"]

_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class LoopbackProxy(AsyncClosing):
    """A running proxy: ``url`` (with its credentials, when it wants some), its ``source`` address."""

    scheme: str
    host: str
    port: int
    source: str
    auth: str | None
    server: asyncio.Server | None = None
    seen: int = 0
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        creds = f"{self.auth}@" if self.auth else ""
        return f"{self.scheme}://{creds}{self.host}:{self.port}"

    async def close(self) -> None:
        """Stop listening and end the connections it carries."""
        if self.server is not None:
            self.server.close()
        for t in list(self.tasks):
            t.cancel()
        for t in list(self.tasks):
            with contextlib.suppress(BaseException):
                await t
        if self.server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self.server.wait_closed()

    async def _listen(self, handler: _Handler) -> LoopbackProxy:
        self.server = await asyncio.start_server(self._tracked(handler), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def _tracked(self, handler: _Handler) -> _Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.tasks.add(task)
            try:
                await handler(reader, writer)
            except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
                pass
            finally:
                self.tasks.discard(task)
                with contextlib.suppress(Exception):
                    writer.close()

        return handle


async def _splice(a: _Stream, b: _Stream) -> None:
    await asyncio.gather(pipe(a[0], b[1]), pipe(b[0], a[1]))


async def start_http_proxy(source: str = "127.0.0.2", *, auth: str | None = None) -> LoopbackProxy:
    """An HTTP forward proxy on 127.0.0.1 connecting out from ``source``."""
    proxy = LoopbackProxy("http", "127.0.0.1", 0, source, auth)
    want = "Basic " + base64.b64encode(auth.encode()).decode() if auth is not None else None

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = [ln for ln in lines[1:] if ln]
        shown = [h.split(":", 1)[1].strip() for h in headers if h.lower().startswith("proxy-authorization:")]
        if want is not None and shown != [want]:
            writer.write(b'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="demo"\r\n'
                         b"Content-Length: 0\r\n\r\n")
            await writer.drain()
            return
        proxy.seen += 1
        proxy.requests.append((lines[0], shown[0] if shown else None))
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            up = await asyncio.open_connection(host, int(port), local_addr=(source, 0))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await _splice((reader, writer), up)
            return
        url = urlsplit(target)
        up_r, up_w = await asyncio.open_connection(url.hostname, url.port or 80, local_addr=(source, 0))
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        kept = [h for h in headers if not h.lower().startswith(("proxy-", "connection:", "keep-alive:"))]
        up_w.write(f"{method} {path} {version}\r\n".encode("latin-1"))
        up_w.write(("\r\n".join([*kept, "Connection: close"]) + "\r\n\r\n").encode("latin-1"))
        await up_w.drain()
        # the request body (Content-Length) and the answer, then close: one request per connection
        length = next((int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0)
        if length:
            up_w.write(await reader.readexactly(length))
            await up_w.drain()
        try:
            await pipe(up_r, writer)
        finally:
            up_w.close()

    return await proxy._listen(handler)  # noqa: SLF001 - its own module


async def start_socks5_proxy(source: str = "127.0.0.3", *, auth: str | None = None) -> LoopbackProxy:
    """A SOCKS5 proxy (CONNECT only) on 127.0.0.1 connecting out from ``source``."""
    proxy = LoopbackProxy("socks5", "127.0.0.1", 0, source, auth)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ver, n = await reader.readexactly(2)
        methods = await reader.readexactly(n)
        want = 0x02 if auth is not None else 0x00
        if ver != 5 or want not in methods:
            writer.write(b"\x05\xff")
            return
        writer.write(bytes([5, want]))
        if auth is not None:
            _v, ulen = await reader.readexactly(2)
            user = await reader.readexactly(ulen)
            (plen,) = await reader.readexactly(1)
            pw = await reader.readexactly(plen)
            ok = f"{user.decode()}:{pw.decode()}" == auth
            writer.write(b"\x01\x00" if ok else b"\x01\x01")
            if not ok:
                return
        _v, cmd, _r, atyp = await reader.readexactly(4)
        if atyp == 1:
            host = ".".join(str(b) for b in await reader.readexactly(4))
        elif atyp == 3:
            (ln,) = await reader.readexactly(1)
            host = (await reader.readexactly(ln)).decode()
        else:
            writer.write(b"\x05\x08\x00\x01" + b"\0" * 6)
            return
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if cmd != 1:
            writer.write(b"\x05\x07\x00\x01" + b"\0" * 6)
            return
        proxy.seen += 1
        proxy.requests.append((f"SOCKS5 CONNECT {host}:{port}", None))
        up = await asyncio.open_connection(host, port, local_addr=(source, 0))
        writer.write(b"\x05\x00\x00\x01" + bytes(4) + b"\0\0")
        await writer.drain()
        await _splice((reader, writer), up)

    return await proxy._listen(handler)  # noqa: SLF001 - its own module
