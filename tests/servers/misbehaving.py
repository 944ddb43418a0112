"""A local HTTP server of our own that misbehaves on request (aiohttp, loopback only).

``async with MisbehavingServer(ports=3) as server:`` serves on ``server.urls`` (one base URL per
port, each a distinct host for the crawler's politeness) and records every request it sees, with its
own timestamp, in ``server.hits``.

Routes:

=============================  =====================================================================
``/page/{n}``                   HTML linking to ``/page/{2n}`` and ``/page/{2n+1}`` (below ``pages``)
``/size/{n}``                   an HTML page of ``n`` bytes
``/ratelimit/{key}``            429 (``?status=503``) the first ``?times=`` hits of ``key``, then 200;
                                ``?after=`` seconds or ``?after=date`` (an HTTP date) as Retry-After
``/always/{status}``            that status, always (``?after=`` adds a Retry-After)
``/slow``                       drips ``?count=`` bytes one every ``?interval=`` seconds
``/stall``                      headers, then silence for ``?seconds=``
``/redirect/loop``              redirects to itself, forever
``/redirect/chain/{n}``         ``n`` redirects, then a page
``/redirect/to``                redirects to ``?url=``
``/huge``                       ``?size=`` bytes streamed, without Content-Length (``?cl=1``: with)
``/gzip``                       a small gzip-encoded page; ``/gzip-bomb``: ``?size=`` zeros, gzipped
``/reset``                      the connection is cut before any response
``/binary``                     ``image/png`` bytes
``/robots.txt``                 ``robots_txt`` given to the constructor (404 when None)
=============================  =====================================================================
"""

from __future__ import annotations

import asyncio
import gzip
import time
from dataclasses import dataclass
from email.utils import formatdate

from aiohttp import web

from tests.support.httpserver import Served, start_app

__all__ = ["Hit", "MisbehavingServer"]


@dataclass(frozen=True, slots=True)
class Hit:
    at: float  # the server's time.monotonic() when the request arrived
    port: int
    path: str
    query: str


class MisbehavingServer:
    def __init__(self, *, ports: int = 1, host: str = "127.0.0.1", pages: int = 1000,
                 robots_txt: str | None = None) -> None:
        self.host = host
        self.nports = ports
        self.pages = pages
        self.robots_txt = robots_txt
        self.hits: list[Hit] = []
        self.ports: list[int] = []
        self._counters: dict[str, int] = {}
        self._served: Served | None = None
        self._bombs: dict[int, bytes] = {}

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def urls(self) -> list[str]:
        return [f"http://{self.host}:{p}" for p in self.ports]

    def hits_for(self, path: str) -> list[Hit]:
        return [h for h in self.hits if h.path == path]

    async def __aenter__(self) -> MisbehavingServer:
        app = web.Application()
        app.middlewares.append(self._record)
        r = app.router
        r.add_get("/page/{n}", self._page)
        r.add_get("/size/{n}", self._size)
        r.add_get("/ratelimit/{key}", self._ratelimit)
        r.add_get("/always/{status}", self._always)
        r.add_get("/slow", self._slow)
        r.add_get("/stall", self._stall)
        r.add_get("/redirect/loop", self._loop)
        r.add_get("/redirect/chain/{n}", self._chain)
        r.add_get("/redirect/to", self._to)
        r.add_get("/huge", self._huge)
        r.add_get("/gzip", self._gzip)
        r.add_get("/gzip-bomb", self._bomb)
        r.add_get("/reset", self._reset)
        r.add_get("/binary", self._binary)
        r.add_get("/robots.txt", self._robots)
        self._served = await start_app(app, sites=self.nports, host=self.host)
        self.ports.extend(self._served.ports)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._served is not None:
            await self._served.close()
            self._served = None

    @web.middleware
    async def _record(self, request: web.Request, handler: web.RequestHandler) -> web.StreamResponse:  # type: ignore[name-defined]
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        self.hits.append(Hit(time.monotonic(), sock[1] if sock else 0, request.path, request.query_string))
        return await handler(request)

    # -- routes ------------------------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        links = "".join(f'<a href="/page/{c}">page {c}</a>\n' for c in (2 * n, 2 * n + 1) if c < self.pages)
        links += '<a href="/page/1#top">home</a> <a href="mailto:x@example.com">mail</a>\n'
        return web.Response(text=f"<html><body><h1>page {n}</h1>\n{links}</body></html>", content_type="text/html")

    async def _size(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        return web.Response(body=b"<html>" + b"x" * max(0, n - 6), content_type="text/html")

    def _retry_after(self, request: web.Request) -> dict[str, str]:
        after = request.query.get("after")
        if after is None:
            return {}
        if after.startswith("date"):
            secs = float(after[4:] or 2)
            return {"Retry-After": formatdate(time.time() + secs, usegmt=True)}
        return {"Retry-After": after}

    async def _ratelimit(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        seen = self._counters[key] = self._counters.get(key, 0) + 1
        if seen <= int(request.query.get("times", "1")):
            status = int(request.query.get("status", "429"))
            return web.Response(status=status, text="slow down", headers=self._retry_after(request))
        return web.Response(text=f"<html>ok after {seen - 1} refusals</html>", content_type="text/html")

    async def _always(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["status"]), text="no", headers=self._retry_after(request))

    async def _slow(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        for _ in range(int(request.query.get("count", "100"))):
            await resp.write(b"x")
            await asyncio.sleep(float(request.query.get("interval", "0.1")))
        return resp

    async def _stall(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        await asyncio.sleep(float(request.query.get("seconds", "30")))
        return resp

    async def _loop(self, request: web.Request) -> web.Response:
        n = int(request.query.get("n", "0"))
        raise web.HTTPFound(f"/redirect/loop?n={n + 1}")

    async def _chain(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n <= 0:
            return web.Response(text="<html>end of chain</html>", content_type="text/html")
        raise web.HTTPFound(f"/redirect/chain/{n - 1}")

    async def _to(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["url"])

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        size = int(request.query.get("size", str(50 * 2**20)))
        headers = {"Content-Type": "text/html"}
        if request.query.get("cl") == "1":
            headers["Content-Length"] = str(size)
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        chunk = b"y" * 65536
        sent = 0
        try:
            while sent < size:
                part = chunk[: size - sent]
                await resp.write(part)
                sent += len(part)
        except (ConnectionError, RuntimeError):
            pass  # the client gave up, as it should
        return resp

    async def _gzip(self, request: web.Request) -> web.Response:
        body = gzip.compress(b"<html><body>" + b"compressed " * 100 + b"</body></html>")
        return web.Response(body=body, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})

    async def _bomb(self, request: web.Request) -> web.Response:
        size = int(request.query.get("size", str(200 * 2**20)))
        body = self._bombs.get(size)
        if body is None:
            body = self._bombs[size] = gzip.compress(b"\0" * size, compresslevel=9)
        return web.Response(body=body, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})

    async def _reset(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.abort()
        await asyncio.sleep(0.05)
        raise ConnectionResetError("cut on purpose")

    async def _binary(self, request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + b"\0" * 100, content_type="image/png")

    async def _robots(self, request: web.Request) -> web.Response:
        if self.robots_txt is None:
            raise web.HTTPNotFound()
        return web.Response(text=self.robots_txt, content_type="text/plain")

