"""BrowserFetcher against real Chromium and real servers on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from crawlherd.demo import DemoSite
from crawlherd.demo.targets import demo_targets, expected_results
from crawlherd.errors import (
    AddressNotAllowedError,
    BodyTooLargeError,
    BrowserUnavailableError,
    ContentTypeError,
    FetchTimeoutError,
    TooManyRedirectsError,
)
from crawlherd.extract.rules import ExtractionRules
from crawlherd.fetch.base import Fetcher, FetchLimits
from crawlherd.fetch.browser import BrowserFetcher, BrowserOptions
from crawlherd.request import Request
from tests.support.demo import first_search_urls
from tests.support.httpserver import serve

pytestmark = pytest.mark.browser

LOOPBACK = FetchLimits(allow_private_addresses=True, total_timeout=30)


@pytest.fixture
def cdp(shared_chromium: str) -> str:
    """The DevTools URL of the test process's shared Chromium (tests/support/chromium.py): every fetcher
    here connects to it instead of launching a browser of its own."""
    return shared_chromium


@pytest.fixture
async def site() -> AsyncIterator[DemoSite]:
    async with DemoSite(seed=42) as demo:
        yield demo


@pytest.fixture
async def fetcher(cdp: str) -> AsyncIterator[BrowserFetcher]:
    async with BrowserFetcher(LOOPBACK, BrowserOptions(cdp_url=cdp, max_pages=2)) as browser:
        yield browser
    assert not browser.started and browser.pages_open == 0


class Server:
    """A loopback server with the awkward pages the demo site does not have."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.user_agents: list[str] = []
        self.in_flight = 0
        self.peak = 0
        self.never = asyncio.Event()
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        routes = {
            "/r/{n}": self.redirect,
            "/final": self.final,
            "/to-localhost": self.to_localhost,
            "/image": self.image,
            "/big": self.big,
            "/hang": self.hang,
            "/slow": self.slow,
            "/cross": self.cross,
            "/secret": self.secret,
            "/sub-redirect": self.sub_redirect,
            "/ws-page": self.ws_page,
            "/ws": self.websocket,
        }
        for path, handler in routes.items():
            app.router.add_get(path, handler)
        return app

    async def redirect(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        self.hits.append(request.path)
        raise web.HTTPFound("/final" if n <= 1 else f"/r/{n - 1}")

    async def final(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        self.user_agents.append(request.headers.get("User-Agent", ""))
        return web.Response(text="<p id=done>final</p>", content_type="text/html")

    async def to_localhost(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        port = self.url.rsplit(":", 1)[1]
        raise web.HTTPFound(f"http://localhost:{port}/final")

    async def image(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + b"0" * 100, content_type="image/png")

    async def big(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(text="<p>" + "x" * 50_000 + "</p>", content_type="text/html")

    async def hang(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        await self.never.wait()  # answers when the test ends
        return web.Response(text="late", content_type="text/html")

    async def slow(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.2)  # long enough for concurrent fetches to overlap
        finally:
            self.in_flight -= 1
        return web.Response(text=f"<p>{request.query_string}</p>", content_type="text/html")

    async def cross(self, request: web.Request) -> web.Response:
        """A page on 127.0.0.1 whose script asks ``localhost`` (another host name) for /secret."""
        self.hits.append(request.path)
        port = self.url.rsplit(":", 1)[1]
        script = f"fetch('http://localhost:{port}/secret').catch(function () {{}});"
        return web.Response(text=f"<p>cross</p><script>{script}</script>", content_type="text/html")

    async def secret(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        return web.Response(text="secret", headers={"Access-Control-Allow-Origin": "*"})

    async def sub_redirect(self, request: web.Request) -> web.Response:
        """A page whose script fetches a same-host URL that redirects to ``localhost``."""
        self.hits.append(request.path)
        script = "fetch('/r-sub').catch(function () {});"
        return web.Response(text=f"<p>sub</p><script>{script}</script>", content_type="text/html")

    async def ws_page(self, request: web.Request) -> web.Response:
        """A page that opens a WebSocket to ``localhost``."""
        self.hits.append(request.path)
        port = self.url.rsplit(":", 1)[1]
        script = (
            f"var ws = new WebSocket('ws://localhost:{port}/ws');"
            "function done(how) { var p = document.createElement('p'); p.id = 'ws-done'; p.textContent = how;"
            " document.body.appendChild(p); }"
            "ws.onmessage = function (e) { done('message ' + e.data); };"
            "ws.onclose = function (e) { done('closed ' + e.code); };"
        )
        return web.Response(text=f"<p>ws</p><script>{script}</script>", content_type="text/html")

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        self.hits.append(request.path)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str("hello")
        await ws.close()
        return ws


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    app = srv.app()

    async def r_sub(request: web.Request) -> web.Response:
        srv.hits.append(request.path)
        port = srv.url.rsplit(":", 1)[1]
        raise web.HTTPFound(f"http://localhost:{port}/secret")

    app.router.add_get("/r-sub", r_sub)
    async with serve(app) as served:
        srv.url = served.url
        yield srv
        srv.never.set()


def _js_rules(site: DemoSite) -> ExtractionRules:
    website = next(w for w in demo_targets(site.url)["websites"] if w["name"] == "demo-jobs-js")
    assert website["requires_playwright"] is True
    return ExtractionRules.from_mapping(website["name"], website["extraction"])


async def test_js_listing_yields_its_items_through_the_browser_and_none_over_plain_http(
    site: DemoSite, fetcher: BrowserFetcher
) -> None:
    assert isinstance(fetcher, Fetcher)
    rules = _js_rules(site)
    url = f"{site.url}/js/search?q=data&l=london"
    async with aiohttp.ClientSession() as http, http.get(url) as plain:
        assert rules.extract(await plain.text(), url).items == []
    response = await fetcher.fetch(Request(url))
    assert response.status == 200 and response.url == url and response.content_type == "text/html"
    items = rules.extract(response.text, response.url).items
    expected = site.expected_items("data", "london")
    assert expected
    assert [(i.url, dict(i.fields)) for i in items] == [
        (e["url"], {k: e[k] for k in ("title", "company", "location", "salary")}) for e in expected
    ]
    assert site.log.by_path()["/api/jobs"] == 1


async def test_wait_for_selector_and_screenshot(site: DemoSite, cdp: str) -> None:
    async with BrowserFetcher(
        LOOPBACK,
        BrowserOptions(cdp_url=cdp, wait_until="domcontentloaded", wait_for="#results[data-state=done]"),
    ) as fetcher:
        response = await fetcher.fetch(Request(f"{site.url}/js/search?q=rust&l=paris", meta={"screenshot": True}))
        assert len(_js_rules(site).extract(response.text, response.url).items) == len(
            site.expected_items("rust", "paris")
        )
        assert response.screenshot is not None and response.screenshot.startswith(b"\x89PNG")
    # long enough for the navigation on a loaded machine (at 3 s it timed out before the selector wait)
    short = FetchLimits(allow_private_addresses=True, total_timeout=8)
    loaded = BrowserOptions(cdp_url=cdp, wait_until="domcontentloaded")
    async with BrowserFetcher(short, loaded) as fetcher:
        with pytest.raises(FetchTimeoutError, match="#never"):
            await fetcher.fetch(Request(f"{site.url}/js/search?q=rust&l=paris", meta={"wait_for": "#never"}))


async def test_guard_refuses_private_addresses_unless_allowed(site: DemoSite, cdp: str) -> None:
    strict = BrowserFetcher(FetchLimits(), BrowserOptions(cdp_url=cdp))
    try:
        with pytest.raises(AddressNotAllowedError, match="allow_private_addresses"):
            await strict.fetch(Request(f"{site.url}/js/search?q=data&l=london"))
        assert not strict.started  # refused before a browser was even needed
        assert len(site.log) == 0
    finally:
        await strict.close()
    async with BrowserFetcher(LOOPBACK, BrowserOptions(cdp_url=cdp)) as allowed:
        assert (await allowed.fetch(Request(f"{site.url}/jobs/1000"))).status == 200
        assert len(site.log) == 1
        # Any status is a Response; the rate-limit headers reach the caller.
        assert (await allowed.fetch(Request(f"{site.url}/jobs/1"))).status == 404
        keyword, location = next(
            (k, loc) for k in site.board.keywords for loc in site.board.locations if site.is_throttled(k, loc, 1)
        )
        throttled = await allowed.fetch(Request(f"{site.url}/search?q={keyword}&l={location}&page=1"))
        assert throttled.status == 429 and throttled.headers["retry-after"] == "1"


async def test_every_request_the_page_makes_goes_through_the_guard(server: Server, cdp: str) -> None:
    async def no_localhost(host: str, port: int, url: str) -> None:
        if host == "localhost":
            raise AddressNotAllowedError(f"{url}: refused by test", url=url)

    options = BrowserOptions(cdp_url=cdp)
    async with BrowserFetcher(LOOPBACK, options, address_check=no_localhost) as fetcher:
        assert (await fetcher.fetch(Request(f"{server.url}/cross"))).status == 200
        assert (await fetcher.fetch(Request(f"{server.url}/sub-redirect"))).status == 200
        refused_ws = await fetcher.fetch(Request(f"{server.url}/ws-page", meta={"wait_for": "#ws-done"}))
        assert "closed 1008" in refused_ws.text
        with pytest.raises(AddressNotAllowedError, match="refused by test"):
            await fetcher.fetch(Request(f"{server.url}/to-localhost"))
    assert "/secret" not in server.hits and "/ws" not in server.hits
    assert {"/cross", "/sub-redirect", "/r-sub", "/to-localhost", "/ws-page"} <= set(server.hits)
    assert "/final" not in server.hits
    # The same pages with the default guard (loopback allowed) do reach /secret: the test can fail.
    async with BrowserFetcher(LOOPBACK, BrowserOptions(cdp_url=cdp)) as fetcher:
        await fetcher.fetch(Request(f"{server.url}/cross"))
        await fetcher.fetch(Request(f"{server.url}/sub-redirect"))
        allowed_ws = await fetcher.fetch(Request(f"{server.url}/ws-page", meta={"wait_for": "#ws-done"}))
        assert "message hello" in allowed_ws.text
    assert server.hits.count("/secret") == 2
    assert server.hits.count("/ws") == 1


async def test_redirects_are_followed_counted_and_capped(
    server: Server, fetcher: BrowserFetcher, cdp: str
) -> None:
    response = await fetcher.fetch(Request(f"{server.url}/r/3"))
    assert response.url == f"{server.url}/final"
    assert response.redirects == (f"{server.url}/r/3", f"{server.url}/r/2", f"{server.url}/r/1")
    assert "final" in response.text
    assert server.user_agents == [LOOPBACK.user_agent]
    async with BrowserFetcher(
        FetchLimits(allow_private_addresses=True, max_redirects=2),
        BrowserOptions(cdp_url=cdp),
    ) as capped:
        with pytest.raises(TooManyRedirectsError, match="max_redirects=2"):
            await capped.fetch(Request(f"{server.url}/r/3"))


async def test_content_type_body_size_and_timeout_limits(
    server: Server, fetcher: BrowserFetcher, cdp: str
) -> None:
    with pytest.raises(ContentTypeError, match="image/png"):
        await fetcher.fetch(Request(f"{server.url}/image"))
    async with BrowserFetcher(
        FetchLimits(allow_private_addresses=True, max_body_size=10_000, total_timeout=6),  # a loaded CI has slow pages
        BrowserOptions(cdp_url=cdp),
    ) as small:
        with pytest.raises(BodyTooLargeError, match="max_body_size=10000"):
            await small.fetch(Request(f"{server.url}/big"))
        with pytest.raises(FetchTimeoutError):
            await small.fetch(Request(f"{server.url}/hang"))
        # still usable after a timeout
        assert (await small.fetch(Request(f"{server.url}/final"))).status == 200


async def test_page_pool_is_bounded(server: Server, fetcher: BrowserFetcher) -> None:
    responses = await asyncio.gather(*(fetcher.fetch(Request(f"{server.url}/slow?n={n}")) for n in range(5)))
    assert [r.status for r in responses] == [200] * 5
    assert [f"n={n}" in r.text for n, r in enumerate(responses)] == [True] * 5
    assert 1 <= server.peak <= 2
    assert fetcher.pages_open == 0
    pages = list(fetcher._context.pages)
    assert 1 <= len(pages) <= 2  # pooled: reused, not one per fetch
    for n in range(3):
        await fetcher.fetch(Request(f"{server.url}/slow?again={n}"))
    assert set(fetcher._context.pages) <= set(pages)
    with pytest.raises(ContentTypeError):
        await fetcher.fetch(Request(f"{server.url}/image"))
    assert len(fetcher._context.pages) == len(pages) - 1  # a failed fetch's page is closed, not pooled


async def test_missing_browser_is_a_clear_error(tmp_path: Any) -> None:
    fetcher = BrowserFetcher(LOOPBACK, BrowserOptions(executable_path=str(tmp_path / "no-chromium")))
    with pytest.raises(BrowserUnavailableError) as info:
        async with fetcher:
            pass
    assert "no-chromium" in str(info.value) and "apt-get install chromium" in str(info.value)
    await fetcher.close()


async def test_a_browser_that_went_away_is_launched_again(server: Server, fetcher: BrowserFetcher) -> None:
    assert (await fetcher.fetch(Request(f"{server.url}/final"))).status == 200
    await fetcher._browser.close()  # as if Chromium had crashed
    assert (await fetcher.fetch(Request(f"{server.url}/final"))).status == 200


async def test_every_js_target_of_the_demo_yields_the_sites_expected_items(
    site: DemoSite, fetcher: BrowserFetcher
) -> None:
    doc = demo_targets(site.url)
    expected = expected_results(site, doc)["demo-jobs-js"]
    rules = _js_rules(site)
    found: dict[str, dict[str, Any]] = {}
    urls = [url for name, url in first_search_urls(doc) if name == "demo-jobs-js"]
    assert len(urls) == 4
    responses = await asyncio.gather(*(fetcher.fetch(Request(url)) for url in urls))
    for response in responses:
        for item in rules.extract(response.text, response.url).items:
            found[item.fingerprint.hex()] = {"url": item.url, "fields": dict(item.fields)}
    assert found == expected and len(found) > 0


async def test_crawler_run_config_screenshot_reaches_the_browser(
    site: DemoSite, cdp: str, caplog: pytest.LogCaptureFixture
) -> None:
    """crawl4ai's CrawlerRunConfig(screenshot=True) through the Crawler: a PNG, and no warning."""
    from crawlherd import AsyncWebCrawler, CrawlerRunConfig

    fetcher = BrowserFetcher(
        LOOPBACK,
        BrowserOptions(cdp_url=cdp, wait_until="domcontentloaded"),
    )
    async with AsyncWebCrawler(fetcher=fetcher) as crawler:
        [result] = await crawler.arun_many(urls=[f"{site.url}/"], config=CrawlerRunConfig(screenshot=True))
        plain = await crawler.arun(f"{site.url}/")
    assert result.success and result.screenshot is not None  # base64, as crawl4ai's
    assert result.screenshot_png is not None and result.screenshot_png.startswith(b"\x89PNG")
    assert plain.screenshot is None  # only when asked
    assert not [r for r in caplog.records if r.name == "crawlherd.crawler"]
