"""HttpFetcher under a session: through HTTP and SOCKS5 proxies (with credentials), with the session's
headers and cookies, reporting the cookies the site set; the address guard before the proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from crawlherd import Request
from crawlherd.errors import AddressNotAllowedError, FetchError
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.http import HttpFetcher
from crawlherd.fetch.session import SESSION_META
from tests.servers.proxies import LoopbackProxy, start_http_proxy, start_socks5_proxy
from tests.support.httpserver import Served, start_app

LOOPBACK = FetchLimits(allowed_networks=("127.0.0.0/8",))


def _site() -> web.Application:
    async def who(request: web.Request) -> web.Response:
        return web.json_response({
            "remote": request.remote,
            "ua": request.headers.get("User-Agent"),
            "cookie": request.headers.get("Cookie"),
            "x": request.headers.get("X-Test"),
        })

    async def login(request: web.Request) -> web.Response:
        raise web.HTTPFound("/who", headers={"Set-Cookie": "sid=abc123; Path=/"})

    app = web.Application()
    app.router.add_get("/who", who)
    app.router.add_post("/login", login)
    app.router.add_get("/login", login)
    return app


@pytest.fixture
async def site() -> AsyncIterator[Served]:
    served = await start_app(_site())
    yield served
    await served.close()


@pytest.fixture
async def proxies() -> AsyncIterator[list[LoopbackProxy]]:
    made = [
        await start_http_proxy("127.0.0.2"),
        await start_http_proxy("127.0.0.4", auth="alice:s3cret-proxy"),
        await start_socks5_proxy("127.0.0.3", auth="bob:s3cret-socks"),
    ]
    yield made
    for p in made:
        await p.close()


def _under(url: str, proxy: str | None, **extra: object) -> Request:
    session = {"id": "s1", "proxy": proxy, "headers": {"User-Agent": "Mozilla/5.0 test"}, "cookies": []}
    session.update(extra)
    return Request(url, meta={SESSION_META: session})


async def test_each_proxy_is_its_own_identity(site: Served, proxies: list[LoopbackProxy]) -> None:
    async with HttpFetcher(LOOPBACK) as fetcher:
        direct = (await fetcher.fetch(_under(f"{site.url}/who", None))).body
        seen = [
            (await fetcher.fetch(_under(f"{site.url}/who", p.url))).text for p in proxies
        ]
    assert b'"remote": "127.0.0.1"' in direct
    for p, text in zip(proxies, seen, strict=True):
        assert f'"remote": "{p.source}"' in text
        assert '"ua": "Mozilla/5.0 test"' in text
        assert p.seen == 1


async def test_cookies_sent_and_set_across_redirects(site: Served, proxies: list[LoopbackProxy]) -> None:
    cookie = {"name": "consent", "value": "yes", "domain": "127.0.0.1", "path": "/"}
    async with HttpFetcher(LOOPBACK) as fetcher:
        for proxy in (None, proxies[0].url, proxies[2].url):
            r = await fetcher.fetch(_under(f"{site.url}/login", proxy, cookies=[cookie]))
            assert r.status == 200
            # the cookie set by the redirect's hop was sent on the next hop, with the session's own
            assert '"cookie": "consent=yes; sid=abc123"' in r.text
            assert r.cookies == [{"name": "sid", "value": "abc123", "domain": "127.0.0.1", "path": "/"}]
        # without a session no cookie is kept
        plain = await fetcher.fetch(Request(f"{site.url}/login"))
        assert '"cookie": null' in plain.text
        assert plain.cookies == []


async def test_wrong_proxy_credentials_fail_the_fetch(site: Served, proxies: list[LoopbackProxy]) -> None:
    wrong_socks = proxies[2].url.replace("s3cret-socks", "nope")
    async with HttpFetcher(LOOPBACK) as fetcher:
        with pytest.raises(FetchError):
            await fetcher.fetch(_under(f"{site.url}/who", wrong_socks))
        r = await fetcher.fetch(_under(f"{site.url}/who", proxies[1].url.replace("s3cret-proxy", "nope")))
        assert r.status == 407
    assert proxies[2].seen == 0 and proxies[1].seen == 0


async def test_guard_checks_the_target_before_the_proxy(proxies: list[LoopbackProxy]) -> None:
    only_loopback_one = FetchLimits(allowed_networks=("127.0.0.1/32",))
    async with HttpFetcher(only_loopback_one) as fetcher:
        for p in proxies:
            with pytest.raises(AddressNotAllowedError):
                await fetcher.fetch(_under("http://10.1.2.3/secret", p.url))
            with pytest.raises(AddressNotAllowedError):
                await fetcher.fetch(_under("http://127.0.0.9:1/", p.url))
    assert [p.seen for p in proxies] == [0, 0, 0]


async def test_a_private_proxy_needs_permission(proxies: list[LoopbackProxy]) -> None:
    async with HttpFetcher(FetchLimits()) as fetcher:
        for p in proxies:
            with pytest.raises(AddressNotAllowedError, match="proxy"):
                await fetcher.fetch(_under("http://93.184.216.34/", p.url))
    assert [p.seen for p in proxies] == [0, 0, 0]
