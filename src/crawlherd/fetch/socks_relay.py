"""A SOCKS5 proxy with credentials for Chromium, which cannot authenticate to one.

Chromium speaks SOCKS5 without authentication only (Playwright refuses ``proxy={"server":
"socks5://...", "username": ...}`` with "Browser does not support socks5 proxy authentication").
So the :class:`~crawlherd.fetch.browser.BrowserFetcher` owns a :class:`SocksRelay` per such proxy: a
SOCKS5 server on ``127.0.0.1`` (a port the OS picks, no authentication) that Chromium is pointed at,
which opens each connection through the real proxy with its credentials (RFC 1929, by
``python-socks``, the library under ``aiohttp-socks``) and then copies bytes both ways. The target's
name goes to the real proxy unresolved, as Chromium sends it.

The relay lives as long as its fetcher's browser and is closed with it. While it runs, any process on
the machine could connect to its port and use the proxy's credentials without knowing them; so each
connection's target is checked by the fetcher's address guard first (a private address refused
unless allowed, as for every page), and a machine shared with untrusted users should use an HTTP proxy
with credentials (Chromium authenticates to those itself) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import struct
from collections.abc import Awaitable, Callable

from python_socks import ProxyConnectionError, ProxyError, ProxyTimeoutError
from python_socks.async_.asyncio import Proxy

from crawlherd._aio import pipe
from crawlherd._redact import redact_url
from crawlherd.errors import CrawlherdError

__all__ = ["SocksRelay", "needs_relay"]

log = logging.getLogger("crawlherd.fetch.browser")

#: Checks a connection's target (host, port, url for the message); raises to refuse it.
TargetCheck = Callable[[str, int, str], Awaitable[None]]

_CONNECT_TIMEOUT = 30.0
_REPLY_OK = b"\x05\x00\x00\x01" + bytes(6)
_REPLY_REFUSED = b"\x05\x02\x00\x01" + bytes(6)  # connection not allowed by ruleset
_REPLY_FAILED = b"\x05\x01\x00\x01" + bytes(6)  # general failure
_REPLY_NO_COMMAND = b"\x05\x07\x00\x01" + bytes(6)
_REPLY_NO_ADDRESS = b"\x05\x08\x00\x01" + bytes(6)


def needs_relay(proxy_url: str) -> bool:
    """True for a SOCKS5 proxy URL with credentials (what Chromium cannot use by itself)."""
    scheme, _, rest = proxy_url.partition("://")
    return scheme.lower() in ("socks5", "socks5h") and "@" in rest.split("/", 1)[0]


class SocksRelay:
    """A local SOCKS5 server (no authentication) relaying through ``upstream`` (a ``socks5://user:pw@``
    URL). ``await relay.start()`` then :attr:`url` for Chromium; ``await relay.close()``."""

    def __init__(self, upstream: str, check: TargetCheck) -> None:
        self._upstream = upstream
        self._check = check
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    def __repr__(self) -> str:
        return f"<SocksRelay 127.0.0.1:{self.port} -> {redact_url(self._upstream)}>"

    @property
    def url(self) -> str:
        """The relay as Chromium's proxy server: ``socks5://127.0.0.1:<port>``."""
        return f"socks5://127.0.0.1:{self.port}"

    async def start(self) -> SocksRelay:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening and end the connections it relays."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(_CONNECT_TIMEOUT):
            target = await _handshake(reader, writer)
        if target is None:
            return
        host, port = target
        shown = f"{'[' + host + ']' if ':' in host else host}:{port}"
        try:
            await self._check(host, port, f"socks5://{shown}")
        except CrawlherdError as exc:
            log.info("SOCKS relay %s: %s refused (%s)", redact_url(self._upstream), shown, exc)
            writer.write(_REPLY_REFUSED)
            return
        try:
            sock = await Proxy.from_url(self._upstream, rdns=True).connect(host, port, timeout=_CONNECT_TIMEOUT)
        except (ProxyError, ProxyConnectionError, ProxyTimeoutError, OSError) as exc:
            log.info("SOCKS relay %s: %s failed (%s)", redact_url(self._upstream), shown, exc)
            writer.write(_REPLY_FAILED)
            return
        up_reader, up_writer = await asyncio.open_connection(sock=sock)
        writer.write(_REPLY_OK)
        await writer.drain()
        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            up_writer.close()


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str, int] | None:
    """SOCKS5 without authentication, then one CONNECT: its (host, port), or None (answered already)."""
    version, n = await reader.readexactly(2)
    methods = await reader.readexactly(n)
    if version != 5 or 0 not in methods:
        writer.write(b"\x05\xff")
        return None
    writer.write(b"\x05\x00")
    _v, command, _r, kind = await reader.readexactly(4)
    if kind == 1:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif kind == 3:
        (length,) = await reader.readexactly(1)
        host = (await reader.readexactly(length)).decode("idna")
    elif kind == 4:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    else:
        writer.write(_REPLY_NO_ADDRESS)
        return None
    (port,) = struct.unpack("!H", await reader.readexactly(2))
    if command != 1:
        writer.write(_REPLY_NO_COMMAND)
        return None
    return host, port


