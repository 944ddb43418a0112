"""Polite over many hosts (issue 13, item 5): a crawl of many loopback hosts, each a chain of pages, with
robots.txt obeyed -- robots.txt is work its host's frontier entry hands out first, so the server sees it
once per host and before any page, never two requests to one host closer than the delay (robots.txt's
Crawl-delay, where it is longer), and no page robots.txt disallows. Every frontier backend.

What the server sees is stamped by the server on the crawler's own clock; nothing here asserts how long
anything took (a slow machine only makes the gaps longer)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from crawlherd import Crawler, CrawlerRunConfig
from crawlherd.clock import SystemClock
from tests._netutil import free_port
from tests.integration.test_durable_frontier import delete_prefix
from tests.support.httpserver import serve

pytestmark = pytest.mark.timeout(120)

HOSTS = 24
PAGES = 4
DELAY = 0.2
SLOW = 0  # the host whose robots.txt asks for a longer Crawl-delay
CRAWL_DELAY = 0.5
CLOCK = SystemClock()


def addresses() -> list[str]:
    return [f"127.78.0.{i + 1}" for i in range(HOSTS)]


class ManyHosts:
    """One aiohttp app listening on HOSTS loopback addresses (one port); it records (path, time) per host."""

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.port = 0
        self.slow_host = ""

    def note(self, request: web.Request) -> None:
        self.seen[request.host].append((CLOCK.now(), request.path))

    async def robots(self, request: web.Request) -> web.Response:
        self.note(request)
        extra = f"Crawl-delay: {CRAWL_DELAY}\n" if request.host == self.slow_host else ""
        return web.Response(text=f"User-agent: *\nDisallow: /private\n{extra}")

    async def page(self, request: web.Request) -> web.Response:
        self.note(request)
        k = int(request.match_info["k"])
        nxt = f'<a href="/p{k + 1}">next</a>' if k < PAGES else ""
        body = f'<html><body>{nxt} <a href="/private">private</a> <a href="/p1">home</a></body></html>'
        return web.Response(text=body, content_type="text/html")

    async def private(self, request: web.Request) -> web.Response:
        self.note(request)
        return web.Response(text="robots.txt disallows this page")


@pytest.fixture
async def site() -> AsyncIterator[ManyHosts]:
    site = ManyHosts()
    app = web.Application()
    app.router.add_get("/robots.txt", site.robots)
    app.router.add_get("/p{k:\\d+}", site.page)
    app.router.add_get("/private", site.private)
    site.port = free_port()
    site.slow_host = f"{addresses()[SLOW]}:{site.port}"
    async with serve(app, hosts=addresses(), port=site.port):
        yield site


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def frontier_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'frontier.db'}"
    return f"{request.getfixturevalue('redis_url')}?prefix={request.getfixturevalue('unique_name')}"


async def test_many_hosts_are_crawled_politely(site: ManyHosts, frontier_url: str) -> None:
    seeds = [f"http://{addr}:{site.port}/p1" for addr in addresses()]
    config = CrawlerRunConfig(check_robots_txt=True, concurrency=16)
    async with Crawler(allow_private_addresses=True, config=config, clock=CLOCK) as crawler:
        results = await crawler.crawl(
            seeds, max_pages=HOSTS * (PAGES + 1), max_depth=PAGES, delay=DELAY, frontier=frontier_url, stream=False
        )
    if frontier_url.startswith("redis"):
        redis_url, prefix = frontier_url.split("?prefix=")
        await delete_prefix(redis_url, prefix)

    # every page once, each disallowed link reported (once per host), robots.txt never among the results
    pages = sorted(r.url for r in results if r.success)
    assert pages == sorted(f"http://{a}:{site.port}/p{k}" for a in addresses() for k in range(1, PAGES + 1))
    refused = [r for r in results if not r.success]
    assert sorted(r.url for r in refused) == sorted(f"http://{a}:{site.port}/private" for a in addresses())
    assert {r.error_type for r in refused} == {"RobotsDisallowedError"}
    assert not any(r.url.endswith("/robots.txt") for r in results)

    assert len(site.seen) == HOSTS
    for host, seen in site.seen.items():
        seen.sort()
        paths = [p for _, p in seen]
        assert paths[0] == "/robots.txt" and paths.count("/robots.txt") == 1, (host, paths)
        assert "/private" not in paths, host
        assert sorted(paths[1:]) == sorted(f"/p{k}" for k in range(1, PAGES + 1)), (host, paths)
        spacing = CRAWL_DELAY if host == site.slow_host else DELAY
        gaps = [b - a for (a, _), (b, _) in zip(seen, seen[1:], strict=False)]
        assert min(gaps) >= spacing, (host, gaps)
