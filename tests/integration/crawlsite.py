"""A local site for crawl tests: ``pages`` pages spread over several ports (= hosts) of 127.0.0.1.

Page ``i`` lives on host ``i % len(ports)`` and links to pages ``2i+1`` and ``2i+2`` (a binary tree, so
every page is reachable from page 0), back to its parent and to page 0 (duplicates for the filter).
Every request is recorded with its arrival time, the port, and the headers the worker sent
(``X-Worker``, ``X-Leased-At``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.httpserver import Served, start_app


@dataclass(frozen=True)
class Hit:
    page: int
    port: int
    at: float
    worker: str
    leased_at: float | None


@dataclass
class CrawlSite:
    pages: int = 2000
    hosts: int = 4
    latency: float = 0.0  # seconds each response takes, so that requests are in flight
    hits: list[Hit] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    _served: Served | None = None

    def url(self, page: int) -> str:
        return f"http://127.0.0.1:{self.ports[page % len(self.ports)]}/p/{page}"

    async def _page(self, request: web.Request) -> web.Response:
        page = int(request.match_info["n"])
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        port = sock[1] if sock else 0
        leased = request.headers.get("X-Leased-At")
        self.hits.append(
            Hit(page, port, time.time(), request.headers.get("X-Worker", ""), float(leased) if leased else None)
        )
        if page >= self.pages or self.ports[page % len(self.ports)] != port:
            return web.Response(status=404)
        if self.latency:
            await asyncio.sleep(self.latency)
        links = [c for c in (2 * page + 1, 2 * page + 2) if c < self.pages]
        links += [(page - 1) // 2] if page else []
        links.append(0)
        body = "".join(f'<a href="{self.url(c)}">{c}</a>\n' for c in links)
        return web.Response(text=f"<html><body><h1>{page}</h1>{body}</body></html>", content_type="text/html")

    async def __aenter__(self) -> CrawlSite:
        app = web.Application()
        app.router.add_get("/p/{n}", self._page)
        self._served = await start_app(app, sites=self.hosts)
        self.ports.extend(self._served.ports)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._served is not None:
            await self._served.close()

    # -- what the server saw -----------------------------------------------------------------------

    def counts(self) -> Counter[int]:
        return Counter(hit.page for hit in self.hits)

    def missing(self) -> list[int]:
        seen = self.counts()
        return [p for p in range(self.pages) if not seen[p]]

    def fetched_twice(self) -> list[int]:
        return sorted(p for p, n in self.counts().items() if n > 1)

    def by_port(self) -> dict[int, list[Hit]]:
        out: dict[int, list[Hit]] = defaultdict(list)
        for hit in self.hits:
            out[hit.port].append(hit)
        for hits in out.values():
            hits.sort(key=lambda h: h.at)
        return dict(out)
