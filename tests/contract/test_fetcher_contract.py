"""The fetcher contract: the same assertions for every fetcher.

- ``mock``: :class:`~crawlherd.fetch.mock.MockFetcher` whose handler answers what the local server
  below answers (the same route table, the same hit log);
- ``http``: :class:`~crawlherd.fetch.http.HttpFetcher` against the local server;
- ``browser``: :class:`~crawlherd.fetch.browser.BrowserFetcher` with the system Chromium (marked
  ``browser``).

A fetcher joins the suite with a ``_make_<name>`` factory and its name in ``FETCHERS``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from crawlherd.errors import (
    AddressNotAllowedError,
    BodyTooLargeError,
    ContentTypeError,
    FetchTimeoutError,
    SendVetoedError,
    TooManyRedirectsError,
)
from crawlherd.fetch import Fetcher, FetchLimits, MockFetcher, MockResponse
from crawlherd.fetch.gate import SEND_VETO
from crawlherd.request import Request
from tests.support.httpserver import serve

BODY_LIMIT = 10_000
MAX_REDIRECTS = 3
LIMITS = FetchLimits(
    allow_private_addresses=True, max_body_size=BODY_LIMIT, max_redirects=MAX_REDIRECTS, total_timeout=20
)
OK_PAGE = "<html><head><title>ok</title></head><body><p>ok</p></body></html>"


class Site:
    """The route table both the local server and the mock's handler answer from; ``hits`` logs every
    request either saw (path only)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.release = asyncio.Event()  # /slow answers only once this is set (at teardown)
        self.base = ""

    async def answer(self, path: str) -> MockResponse:
        self.hits.append(path)
        html = "text/html; charset=utf-8"
        if path == "/ok":
            return MockResponse(200, OK_PAGE, content_type=html)
        if path == "/missing":
            return MockResponse(404, "<html><body>not here</body></html>", content_type=html)
        if path.startswith("/redirect/"):
            left = int(path.rsplit("/", 1)[1])
            return MockResponse(302, headers={"Location": f"/redirect/{left - 1}" if left > 1 else "/ok"})
        if path == "/big":
            return MockResponse(200, "<html><body>" + "x" * (2 * BODY_LIMIT) + "</body></html>", content_type=html)
        if path == "/png":
            return MockResponse(200, b"\x89PNG\r\n\x1a\n" + b"\0" * 64, content_type="image/png")
        if path == "/latin1":
            return MockResponse(200, "<html><body><p>café</p></body></html>".encode("latin-1"),
                                content_type="text/html; charset=ISO-8859-1")
        if path == "/bogus-charset":
            return MockResponse(200, b"ok \xff", content_type="text/plain; charset=bogus")
        if path == "/slow":
            await asyncio.wait_for(self.release.wait(), timeout=60)
            return MockResponse(200, OK_PAGE, content_type=html)
        return MockResponse(404, "no such route", content_type="text/plain")

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    site = Site()

    async def handle(request: web.Request) -> web.Response:
        answer = await site.answer(request.path)
        body = answer.body.encode() if isinstance(answer.body, str) else answer.body
        return web.Response(status=answer.status, body=body, headers=answer.header_map())

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    async with serve(app) as served:
        site.base = served.url
        yield site
        site.release.set()


async def _mock_answer(site: Site, request: Request) -> MockResponse:
    return await site.answer("/" + request.url.split("/", 3)[3])


def _make_mock(site: Site, limits: FetchLimits) -> Fetcher:
    return MockFetcher(lambda request: _mock_answer(site, request), limits)


def _make_http(site: Site, limits: FetchLimits) -> Fetcher:
    from crawlherd.fetch.http import HttpFetcher

    return HttpFetcher(limits)


def _make_browser(site: Site, limits: FetchLimits, cdp_url: str) -> Fetcher:
    from crawlherd.fetch.browser import BrowserFetcher, BrowserOptions

    # the test process's shared Chromium (tests/support/chromium.py), not a launch per test
    return BrowserFetcher(limits, BrowserOptions(cdp_url=cdp_url, wait_until="load"))


FETCHERS = ["mock", "http", pytest.param("browser", marks=pytest.mark.browser)]
MakeFetcher = Callable[..., Awaitable[Fetcher]]


@pytest.fixture(params=FETCHERS)
async def make_fetcher(request: pytest.FixtureRequest, site: Site) -> AsyncIterator[MakeFetcher]:
    """``await make_fetcher(**limit_changes)`` -> an entered fetcher of the parametrised kind with
    ``LIMITS`` (changed as asked); closed after the test."""
    kind = str(request.param)
    opened: list[Fetcher] = []

    async def make(**changes: Any) -> Fetcher:
        import dataclasses

        limits = dataclasses.replace(LIMITS, **changes)
        if kind == "browser":
            fetcher = _make_browser(site, limits, request.getfixturevalue("shared_chromium"))
        else:
            fetcher = {"mock": _make_mock, "http": _make_http}[kind](site, limits)
        opened.append(fetcher)
        return await fetcher.__aenter__()

    yield make
    for fetcher in opened:
        await fetcher.close()


async def test_a_page_comes_back_with_status_final_url_and_headers(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    response = await fetcher.fetch(Request(site.url("/ok")))
    assert response.status == 200
    assert response.url == site.url("/ok")
    assert response.redirects == ()
    assert response.content_type == "text/html"
    assert "<p>ok</p>" in response.text
    assert response.request.url == site.url("/ok")
    assert site.hits == ["/ok"]


async def test_an_error_status_is_a_response_not_an_exception(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    response = await fetcher.fetch(Request(site.url("/missing")))
    assert response.status == 404
    assert "not here" in response.text


async def test_redirects_are_followed_to_the_final_url(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    response = await fetcher.fetch(Request(site.url("/redirect/2")))
    assert response.status == 200
    assert response.url == site.url("/ok")
    assert response.redirects == (site.url("/redirect/2"), site.url("/redirect/1"))
    assert site.hits == ["/redirect/2", "/redirect/1", "/ok"]


async def test_more_redirects_than_allowed_is_a_typed_error(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    with pytest.raises(TooManyRedirectsError, match=f"max_redirects={MAX_REDIRECTS}"):
        await fetcher.fetch(Request(site.url(f"/redirect/{MAX_REDIRECTS + 2}")))
    assert "/ok" not in site.hits


async def test_a_body_over_the_cap_is_refused(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    with pytest.raises(BodyTooLargeError, match=f"max_body_size={BODY_LIMIT}"):
        await fetcher.fetch(Request(site.url("/big")))


async def test_a_content_type_outside_the_allow_list_is_refused(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    with pytest.raises(ContentTypeError, match="image/png"):
        await fetcher.fetch(Request(site.url("/png")))
    anything = await make_fetcher(allowed_content_types=())
    assert (await anything.fetch(Request(site.url("/png")))).content_type == "image/png"


async def test_the_address_guard_refuses_loopback_before_any_request(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher(allow_private_addresses=False)
    with pytest.raises(AddressNotAllowedError, match="allow_private_addresses") as caught:
        await fetcher.fetch(Request(site.url("/ok")))
    assert caught.value.request is not None and caught.value.request.url == site.url("/ok")
    assert site.hits == []
    allowed = await make_fetcher(allow_private_addresses=False, allowed_networks=("127.0.0.1/32",))
    assert (await allowed.fetch(Request(site.url("/ok")))).status == 200


async def test_a_timeout_is_a_typed_error(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher(total_timeout=1)
    with pytest.raises(FetchTimeoutError):
        await fetcher.fetch(Request(site.url("/slow")))


async def test_a_request_can_shorten_the_total_timeout(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    with pytest.raises(FetchTimeoutError):
        await fetcher.fetch(Request(site.url("/slow"), meta={"crawlherd.timeouts": {"total": 1}}))


async def test_the_declared_charset_decodes_the_text(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    response = await fetcher.fetch(Request(site.url("/latin1")))
    assert "<p>café</p>" in response.text


async def test_an_unknown_charset_decodes_as_utf8_with_replacement(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    response = await fetcher.fetch(Request(site.url("/bogus-charset")))
    assert response.encoding == "utf-8"
    assert response.text == "ok \ufffd"


async def test_the_send_gate_is_passed_before_each_hop(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    passed: list[str] = []

    def gate(host: str) -> None:
        passed.append(host)

    fetcher.send_gate = gate
    await fetcher.fetch(Request(site.url("/redirect/1")))
    host = site.base.split("//", 1)[1]
    assert passed == [host, host]


async def test_a_veto_that_comes_while_the_request_waits_at_the_gate_stops_it_unsent(
    make_fetcher: MakeFetcher, site: Site
) -> None:
    """SEND_VETO is asked once the gate lets the request go: a reason that arose while it waited there (the
    session's proxy came to rest) stops it before anything reaches the site; no reason, and it goes."""
    fetcher = await make_fetcher()
    vetoed: list[str] = []
    opened = asyncio.Event()

    async def wait(host: str) -> None:
        await opened.wait()

    fetcher.send_gate = wait
    token = SEND_VETO.set(lambda: vetoed[0] if vetoed else None)
    try:
        waiting = asyncio.ensure_future(fetcher.fetch(Request(site.url("/ok"))))
        await asyncio.sleep(0.05)
        vetoed.append("its proxy rests")  # meanwhile
        opened.set()
        with pytest.raises(SendVetoedError, match="not sent: its proxy rests"):
            await waiting
        assert site.hits == []
        vetoed.clear()
        assert (await fetcher.fetch(Request(site.url("/ok")))).status == 200
    finally:
        SEND_VETO.reset(token)
    assert site.hits == ["/ok"]


async def test_the_fetcher_has_every_member_of_the_protocol(make_fetcher: MakeFetcher) -> None:
    fetcher = await make_fetcher()
    assert isinstance(fetcher, Fetcher)
    assert fetcher.send_gate is None
    assert isinstance(fetcher.takes_screenshots, bool)


async def test_fetch_result_answers_as_fetch_does(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    for path in ("/redirect/1", "/missing", "/latin1"):
        response = await fetcher.fetch(Request(site.url(path)))
        result = await fetcher.fetch_result(Request(site.url(path)))
        assert result.url == site.url(path) and result.final_url == response.url
        assert (result.status_code, result.success) == (response.status, response.status < 400)
        assert (result.body, result.text, result.encoding) == (response.body, response.text, response.encoding)
        assert result.redirects == response.redirects and result.content_type == response.content_type
    with pytest.raises(ContentTypeError, match="image/png"):
        await fetcher.fetch_result(Request(site.url("/png")))
    with pytest.raises(TooManyRedirectsError):
        await fetcher.fetch_result(Request(site.url(f"/redirect/{MAX_REDIRECTS + 2}")))


async def test_takes_screenshots_says_whether_a_screenshot_comes_back(make_fetcher: MakeFetcher, site: Site) -> None:
    fetcher = await make_fetcher()
    response = await fetcher.fetch(Request(site.url("/ok"), meta={"crawlherd.screenshot": True}))
    if fetcher.takes_screenshots:
        assert response.screenshot is not None and response.screenshot.startswith(b"\x89PNG")
    else:
        assert response.screenshot is None
