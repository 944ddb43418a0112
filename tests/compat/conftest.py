"""A small site on three loopback addresses (standing in for example.com, .org and .net) for the
compatibility tests: every path answers an HTML page, ``/limited`` answers 429, ``/viewport`` a page
whose script writes the window's width into it. ``site.hits`` counts requests per path."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from tests.support.httpserver import StartApp

PAGE = """<!doctype html><html><head><title>Example</title></head><body>
<header><nav><a href="/">Home</a> <a href="/about">About</a> <a href="/contact">Contact</a></nav></header>
<article><h1>Example Domain</h1>
<p>This domain is for use in illustrative examples in documents. You may use this domain in literature
without prior coordination or asking for permission.</p>
<p>Read <a href="https://www.iana.org/domains/example">more information</a> about it.</p></article>
<footer class="footer"><a href="/privacy">Privacy</a> <a href="/terms">Terms</a></footer>
</body></html>"""

VIEWPORT = """<!doctype html><html><body><p id="w">unset</p>
<script>document.getElementById('w').textContent = 'width=' + window.innerWidth;</script></body></html>"""


@dataclass
class Site:
    urls: list[str]
    hits: Counter[str] = field(default_factory=Counter)

    @property
    def url(self) -> str:
        return self.urls[0]


@pytest.fixture
async def site(http_server: StartApp) -> Site:
    made = Site([])

    async def handle(request: web.Request) -> web.Response:
        made.hits[request.path] += 1
        if request.path == "/limited":
            return web.Response(status=429, text="slow down", headers={"Retry-After": "0"})
        body = VIEWPORT if request.path == "/viewport" else PAGE
        return web.Response(text=body, content_type="text/html")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    served = await http_server(app, hosts=hosts)
    made.urls = [f"http://{host}:{port}" for host, port in zip(hosts, served.ports, strict=True)]
    return made
