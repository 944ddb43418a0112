"""Browser pages in real headless Chromium (the test process's shared one, over CDP): scroll and
load-more pagination, ``wait_for``, screenshots on the default ``AsyncWebCrawler``, the screenshot of a
failed page, and sessions (cookies, headers, proxy) shared with the HTTP fetcher."""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from crawlherd import AsyncWebCrawler, CrawlerRunConfig
from crawlherd.errors import AddressNotAllowedError, ConfigurationError, FetchTimeoutError
from crawlherd.fetch.actions import BrowserPagination, PageActions
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.browser import BrowserFetcher, BrowserOptions
from crawlherd.fetch.chromium import CDP_URL_ENV
from crawlherd.request import Request
from tests.servers.jslisting import JsListing
from tests.servers.proxies import start_http_proxy
from tests.support.httpserver import Served, serve

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

LOOPBACK = FetchLimits(allow_private_addresses=True, total_timeout=40)


@pytest.fixture
async def board() -> AsyncIterator[tuple[JsListing, Served]]:
    listing = JsListing()
    async with serve(listing.app()) as served:
        yield listing, served


@pytest.fixture
async def browser(shared_chromium: str) -> AsyncIterator[BrowserFetcher]:
    options = BrowserOptions(cdp_url=shared_chromium, wait_until="load", max_pages=2)
    async with BrowserFetcher(LOOPBACK, options) as fetcher:
        yield fetcher
    assert not fetcher.started and fetcher.pages_open == 0


def titles(html: str) -> list[str]:
    from selectolax.lexbor import LexborHTMLParser

    return [node.text(strip=True) for node in LexborHTMLParser(html).css("li.job a.title")]


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


# -- pagination inside the page -------------------------------------------------------------------


@pytest.mark.parametrize(("path", "kind"), [("/scroll", "scroll"), ("/more", "load_more")])
async def test_in_page_pagination_loads_every_item(
    board: tuple[JsListing, Served], browser: BrowserFetcher, path: str, kind: str
) -> None:
    listing, served = board
    pagination = BrowserPagination(type=kind, selector="button#more" if kind == "load_more" else None,  # type: ignore[arg-type]
                                   item_selector="li.job", max_pages=50, settle=3.0)
    actions = PageActions(wait_for="css:li.job", pagination=pagination)
    response = await browser.fetch(Request(f"{served.url}{path}?q=python", meta={"crawlherd.page": actions.to_meta()}))
    expected = [job["title"] for job in listing.jobs("python")]
    assert titles(response.text) == expected  # 23 items in 5 batches: every one, in order, once
    assert [offset for _, offset in listing.api_calls] == [0, 5, 10, 15, 20]
    # Without pagination the same page holds the first batch only: the test can fail.
    plain = await browser.fetch(Request(f"{served.url}{path}?q=rust", meta={"crawlherd.page": {"wait_for": "li.job"}}))
    assert len(titles(plain.text)) == listing.batch


async def test_in_page_pagination_stops_at_max_pages(board: tuple[JsListing, Served], browser: BrowserFetcher) -> None:
    listing, served = board
    for kind, path in (("scroll", "/scroll"), ("load_more", "/more")):
        pagination = BrowserPagination(type=kind, selector="button#more" if kind == "load_more" else None,  # type: ignore[arg-type]
                                       item_selector="li.job", max_pages=3, settle=3.0)
        actions = PageActions(wait_for="li.job", pagination=pagination).to_meta()
        response = await browser.fetch(Request(f"{served.url}{path}?q=go", meta={"crawlherd.page": actions}))
        assert len(titles(response.text)) == 3 * listing.batch, kind


def test_bad_in_page_pagination_is_refused_clearly() -> None:
    with pytest.raises(ConfigurationError, match="load_more needs a 'selector'"):
        BrowserPagination(type="load_more")
    with pytest.raises(ConfigurationError, match="max_pages"):
        BrowserPagination(type="scroll", max_pages=0)
    with pytest.raises(ConfigurationError, match="empty"):
        PageActions(wait_for="js:  ")


# -- wait_for ---------------------------------------------------------------------------------------


async def test_wait_for_a_selector_or_a_js_condition_with_a_timeout(
    board: tuple[JsListing, Served], browser: BrowserFetcher
) -> None:
    _, served = board
    url = f"{served.url}/ready?delay=400"
    for condition in ("css:#ready", "#ready", "js:() => window.appReady === true"):
        response = await browser.fetch(Request(url, meta={"crawlherd.page": {"wait_for": condition}}))
        assert 'id="ready"' in response.text, condition
    # the same page read without waiting is not ready yet: the waits above did something
    early = await browser.fetch(Request(f"{served.url}/ready?delay=5000"))
    assert 'id="ready"' not in early.text
    never = {"wait_for": "js:() => window.neverTrue", "wait_timeout": 1.0}
    with pytest.raises(FetchTimeoutError, match=r"condition js:\(\) => window.neverTrue did not appear in time"):
        await browser.fetch(Request(url, meta={"crawlherd.page": never}))
    with pytest.raises(FetchTimeoutError, match="selector '#nope'"):
        await browser.fetch(Request(url, meta={"crawlherd.page": {"wait_for": "css:#nope", "wait_timeout": 0.5}}))


async def test_a_failed_page_keeps_its_screenshot(board: tuple[JsListing, Served], browser: BrowserFetcher) -> None:
    """A fetch that asked for a screenshot and failed after the page rendered carries one."""
    _, served = board
    wait = {"wait_for": "#never", "wait_timeout": 0.5}
    meta = {"crawlherd.page": wait, "crawlherd.screenshot": True}
    with pytest.raises(FetchTimeoutError) as info:
        await browser.fetch(Request(f"{served.url}/captcha", meta=meta))
    assert info.value.screenshot is not None and png_size(info.value.screenshot)[0] > 100
    with pytest.raises(FetchTimeoutError) as unasked:
        await browser.fetch(Request(f"{served.url}/captcha", meta={"crawlherd.page": wait}))
    assert unasked.value.screenshot is None


# -- screenshot=True on the default AsyncWebCrawler --------------------------------------------------


async def test_screenshot_on_the_default_crawler_is_a_rendered_png(
    board: tuple[JsListing, Served], shared_chromium: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """crawl4ai's usage, unchanged: the default crawler renders a request that asks for a screenshot in
    Chromium (base64 PNG in result.screenshot); the other requests stay on HTTP."""
    listing, served = board
    monkeypatch.setenv(CDP_URL_ENV, shared_chromium)  # the default crawler's browser: this process's Chromium
    url = f"{served.url}/more?q=data"
    async with AsyncWebCrawler(allow_private_addresses=True) as crawler:
        result = await crawler.arun(url, config=CrawlerRunConfig(screenshot=True, wait_for="css:li.job"))
        plain = await crawler.arun(url)
        [many] = await crawler.arun_many(urls=[f"{served.url}/scroll?q=ml"], config=CrawlerRunConfig(screenshot=True))
    assert result.success and isinstance(result.screenshot, str)
    png = base64.b64decode(result.screenshot)
    width, height = png_size(png)
    assert width >= 800 and height >= 1000  # full page: five 200 px items below a heading
    assert result.screenshot_png == png
    assert len(titles(result.text)) == listing.batch  # rendered: the JavaScript ran
    (tmp_path / "default-crawler.png").write_bytes(png)  # looked at by hand when this test was written
    assert plain.success and plain.screenshot is None and titles(plain.text) == []  # HTTP: no JavaScript
    assert many.success and many.screenshot is not None and png_size(many.screenshot_png or b"")[1] > 0
    assert not [r for r in caplog.records if "cannot take screenshots" in r.getMessage()]


# -- sessions: the same cookies, headers and proxy as HTTP --------------------------------------------


async def test_a_session_brings_its_cookies_headers_and_proxy_and_learns_the_sites_cookies(
    board: tuple[JsListing, Served], browser: BrowserFetcher
) -> None:
    listing, served = board
    async with await start_http_proxy("127.0.0.2", auth="alice:s3cret") as proxy:
        session = {
            "id": "s-1",
            "proxy": proxy.url,
            "headers": {"User-Agent": "BoardBrowser/1.0", "Accept-Language": "de"},
            "cookies": [{"name": "sid", "value": "logged-in-over-http", "domain": "127.0.0.1", "path": "/"}],
        }
        response = await browser.fetch(Request(f"{served.url}/cookies", meta={"crawlherd.session": session}))
        assert "sid=logged-in-over-http" in response.text  # the cookie the HTTP login got, used by the browser
        seen = listing.headers[-1]
        assert seen["User-Agent"] == "BoardBrowser/1.0" and seen["Accept-Language"] == "de"
        assert response.cookies == [{"name": "seen", "value": "1", "domain": "127.0.0.1", "path": "/"}]
        assert listing.remotes[-1] == "127.0.0.2"  # the site saw the proxy
        assert proxy.requests and all(f"127.0.0.1:{served.port}" in line for line, _ in proxy.requests)
        assert {auth for _, auth in proxy.requests} == {"Basic " + base64.b64encode(b"alice:s3cret").decode()}
        # The same session again: its context is kept, and the site's cookie is sent back.
        session["cookies"] = [*session["cookies"], *response.cookies]  # type: ignore[list-item]
        again = await browser.fetch(Request(f"{served.url}/cookies", meta={"crawlherd.session": session}))
        assert "seen=1" in again.text and again.cookies == [
            {"name": "seen", "value": "2", "domain": "127.0.0.1", "path": "/"}
        ]
        # Another session does not see the first one's cookies; a request without a session neither.
        other = await browser.fetch(Request(f"{served.url}/cookies", meta={"crawlherd.session": {"id": "s-2"}}))
        assert "sid=" not in other.text and "seen=" not in other.text
        bare = await browser.fetch(Request(f"{served.url}/cookies"))
        assert "sid=" not in bare.text and bare.cookies == []


async def test_the_guard_checks_the_target_and_the_proxy_before_any_traffic(
    board: tuple[JsListing, Served], shared_chromium: str
) -> None:
    listing, served = board
    async with await start_http_proxy() as proxy:
        refused_port = proxy.port

        async def no_proxy_port(host: str, port: int, url: str) -> None:
            if port == refused_port:
                raise AddressNotAllowedError(f"{url}: refused by test", url=url)

        options = BrowserOptions(cdp_url=shared_chromium, wait_until="load")
        session = {"id": "s-p", "proxy": f"http://bob:pw@127.0.0.1:{proxy.port}"}
        async with BrowserFetcher(LOOPBACK, options, address_check=no_proxy_port) as fetcher:
            with pytest.raises(AddressNotAllowedError, match="refused by test") as info:
                await fetcher.fetch(Request(f"{served.url}/cookies", meta={"crawlherd.session": session}))
            assert "pw" not in str(info.value)  # the proxy's credentials are not in the message
        # A private target is refused before it goes to a proxy.
        strict = BrowserFetcher(FetchLimits(), options)
        try:
            with pytest.raises(AddressNotAllowedError, match="allow_private_addresses"):
                await strict.fetch(Request(f"{served.url}/cookies", meta={"crawlherd.session": {**session, "id": "x"}}))
        finally:
            await strict.close()
        assert proxy.requests == [] and listing.visits == 0


# -- through `crawlherd run`: the worker, the job message, the site spec -------------------------------

_TARGETS = """
[[websites]]
name = "js-scroll"
base_url = "{url}"
search_url_template = "{url}/scroll?q={{keywords}}"
requires_playwright = true
pagination = {{ type = "scroll", max_pages = 20, settle = "3s" }}
browser = {{ wait_for = "css:li.job", wait_timeout = "20s" }}
politeness = {{ min_delay = 0, max_concurrency = 2, robots = "ignore" }}
extraction = {{ item_selector = "li.job", item_url = "a.title@href", fields = {{ title = "a.title" }} }}

[[websites]]
name = "js-more"
base_url = "{url}"
search_url_template = "{url}/more?q={{keywords}}"
requires_playwright = true
pagination = {{ type = "load_more", selector = "button#more", max_pages = 20, settle = "3s" }}
browser = {{ wait_for = "li.job" }}
politeness = {{ min_delay = 0, max_concurrency = 2, robots = "ignore" }}
extraction = {{ item_selector = "li.job", item_url = "a.title@href", fields = {{ title = "a.title" }} }}

[[websites]]
name = "js-blocked"
base_url = "{url}"
search_url_template = "{url}/blocked?q={{keywords}}"
requires_playwright = true
browser = {{ failure_screenshots = true }}
politeness = {{ min_delay = 0, robots = "ignore" }}
extraction = {{ item_selector = "li.job", item_url = "a.title@href", fields = {{ title = "a.title" }} }}

[[targets]]
website = "js-scroll"
keywords = ["python", "data"]
every = "1d"

[[targets]]
website = "js-more"
keywords = ["rust"]
every = "1d"

[[targets]]
website = "js-blocked"
keywords = ["go"]
every = "1d"
"""


@pytest.mark.slow
async def test_crawlherd_run_collects_every_item_of_scroll_and_load_more_listings(
    board: tuple[JsListing, Served], shared_chromium: str, tmp_path: Path
) -> None:
    import json

    from tests.support.cli import crawlherd, invoke

    listing, served = board
    (tmp_path / "targets.toml").write_text(_TARGETS.format(url=served.url))
    env = {"CRAWLHERD_DATABASE_URL": f"sqlite:///{tmp_path}/run.db", CDP_URL_ENV: shared_chromium,
           "CRAWLHERD_SCREENSHOT_DIR": str(tmp_path / "shots")}
    code, out, err = await invoke("targets", "import", "targets.toml", env=env, cwd=tmp_path)
    assert code == 0, err
    code, out, err = await invoke("targets", "list", "--json", env=env, cwd=tmp_path)
    ids = [str(t["id"]) for t in json.loads(out)]
    assert len(ids) == 4, out
    assert (await invoke("targets", "run", *ids, env=env, cwd=tmp_path))[0] == 0
    code, out, err = await crawlherd(
        "run", "--until-idle", "--no-web", "--allow-private", "--json", "--max-attempts", "1",
        env=env, cwd=tmp_path, timeout=150,
    )
    assert code == 0, err
    stats = json.loads(out)
    assert stats["jobs/succeeded"] == 3 and stats["jobs/dead"] == 1, stats
    code, out, err = await invoke("items", "export", env=env, cwd=tmp_path)
    assert code == 0, err
    stored: dict[str, set[tuple[str, str]]] = {}
    for line in out.splitlines():
        item = json.loads(line)
        stored.setdefault(item["website"], set()).add((item["url"], item["title"]))
    truth = {
        "js-scroll": {(served.url + j["url"], j["title"]) for k in ("python", "data") for j in listing.jobs(k)},
        "js-more": {(served.url + j["url"], j["title"]) for j in listing.jobs("rust")},
    }
    assert stored == truth and len(truth["js-scroll"]) == 2 * listing.per_keyword
    # The blocked page's screenshot is kept for the operator, and the job's error says where.
    [shot] = (tmp_path / "shots" / "js-blocked").glob("*-403-*.png")
    assert png_size(shot.read_bytes())[0] > 100
    code, out, err = await invoke("jobs", "list", "--status", "dead", "--json", env=env, cwd=tmp_path)
    assert code == 0 and str(shot) in out, out
