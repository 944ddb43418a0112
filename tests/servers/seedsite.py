"""A local stand-in for the hosts the seed documents' examples name (example.com, example.org, ...).

``async with SeedSite(["example.com", "example.org"]) as site:`` listens on one loopback port per host
name and records every request it sees (:attr:`hits`, in arrival order) and how many were in flight at
once (:attr:`max_in_flight`, overall and per host). The examples are run unchanged, so their URLs keep
the real host names: :func:`routed_fetcher_class` gives an ``HttpFetcher`` that sends each request for
one of those hosts to its local port instead (the test installs it as ``crawlherd.fetch.http.HttpFetcher``
so that ``AsyncWebCrawler()`` picks it up).

Knobs, all bounded so that a crawler that misbehaves fails the test rather than hangs it:

- ``barrier``: hold every request until that many are in flight at once (or ``hold_timeout`` passed),
  so "N at a time" is measured at the server rather than assumed;
- ``rate_limited``: ``{path: n}`` -- the first ``n`` requests of ``path`` get 429 with
  ``Retry-After: retry_after``;
- ``after``: ``{host: [other hosts]}`` -- ``host`` is answered only once the others have been answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from crawlherd.fetch.base import FetchLimits, Response
from crawlherd.fetch.http import HttpFetcher
from crawlherd.request import Request
from tests.support.httpserver import Served, start_app

__all__ = ["SeedHit", "SeedSite", "routed_fetcher_class"]


@dataclass(frozen=True, slots=True)
class SeedHit:
    host: str
    path: str
    status: int
    at: float  # the server's time.monotonic() on arrival
    note: Any = None  # what ``on_hit`` returned for it


@dataclass
class SeedSite:
    hosts: list[str]
    barrier: int = 0
    hold_timeout: float = 5.0
    rate_limited: dict[str, int] = field(default_factory=dict)
    retry_after: int = 1
    after: dict[str, list[str]] = field(default_factory=dict)
    on_hit: Callable[[], Any] | None = None
    hits: list[SeedHit] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self._served: Served | None = None
        self._host_of_port: dict[int, str] = {}
        self._counts: dict[str, int] = {}
        self._waiting: list[asyncio.Event] = []
        self._answered: dict[str, asyncio.Event] = {h: asyncio.Event() for h in self.hosts}

    async def __aenter__(self) -> SeedSite:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._serve)
        self._served = await start_app(app, sites=len(self.hosts))
        for host, port in zip(self.hosts, self._served.ports, strict=True):
            self.ports[host] = port
            self._host_of_port[port] = host
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._served is not None:
            await self._served.close()
            self._served = None

    def hits_of(self, host: str | None = None, path: str | None = None) -> list[SeedHit]:
        return [h for h in self.hits if (host is None or h.host == host) and (path is None or h.path == path)]

    async def _serve(self, request: web.Request) -> web.Response:
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        host = self._host_of_port.get(sock[1] if sock else 0, "?")
        path = request.path
        note = self.on_hit() if self.on_hit is not None else None
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.barrier:
                if self.in_flight >= self.barrier:  # the crowd is complete: release everyone held
                    for event in self._waiting:
                        event.set()
                    self._waiting.clear()
                else:
                    event = asyncio.Event()
                    self._waiting.append(event)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), self.hold_timeout)
            for other in self.after.get(host, ()):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._answered[other].wait(), self.hold_timeout)
            key = path
            seen = self._counts[key] = self._counts.get(key, 0) + 1
            if seen <= self.rate_limited.get(path, 0):
                status = 429
                response = web.Response(status=429, text="slow down", headers={"Retry-After": str(self.retry_after)})
            else:
                status = 200
                response = web.Response(text=_page(host, path), content_type="text/html")
            self.hits.append(SeedHit(host, path, status, time.monotonic(), note))
            return response
        finally:
            self.in_flight -= 1
            if host in self._answered and status_ok(self.hits, host):
                self._answered[host].set()


def status_ok(hits: list[SeedHit], host: str) -> bool:
    return any(h.host == host and h.status == 200 for h in hits)


def _page(host: str, path: str) -> str:
    return (
        f"<html><head><title>{host}</title><script>track()</script><style>p{{color:red}}</style></head>"
        '<body><nav><a href="/">Home</a> <a href="/about">About</a></nav>'
        f'<main><h1>{host}{path}</h1><p>A page of <b>{host}</b>. <a href="/next">Next</a></p>'
        '<ul><li>one</li><li>two</li></ul><a href="https://elsewhere.test/x">elsewhere</a></main>'
        "<footer>footer text</footer></body></html>"
    )


def routed_fetcher_class(site: SeedSite) -> type[HttpFetcher]:
    """An HttpFetcher that sends requests for ``site``'s host names to their local ports."""

    class RoutedHttpFetcher(HttpFetcher):
        def __init__(self, limits: FetchLimits | None = None, **kw: Any) -> None:
            limits = FetchLimits(allow_private_addresses=True) if limits is None else limits
            if not limits.allow_private_addresses:
                from dataclasses import replace

                limits = replace(limits, allow_private_addresses=True)
            super().__init__(limits, **kw)

        async def fetch(self, request: Request) -> Response:
            from urllib.parse import urlsplit

            parts = urlsplit(request.url)
            port = site.ports.get(parts.hostname or "")
            if port is None:
                return await super().fetch(request)
            local = f"http://127.0.0.1:{port}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")
            response = await super().fetch(request.replace(url=local))
            return response

    return RoutedHttpFetcher
