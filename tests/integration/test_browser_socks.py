"""SOCKS5 with credentials in Chromium, which cannot authenticate to a SOCKS5 proxy: the browser fetcher
relays through a local SOCKS5 server of its own (:mod:`crawlherd.fetch.socks_relay`) -- for a
session's proxy and for the browser's own (``BrowserOptions.proxy``); the relay checks each target
with the address guard and is gone with the browser."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from python_socks import ProxyError
from python_socks.async_.asyncio import Proxy

from crawlherd.demo import DemoSite, LoopbackProxy, start_socks5_proxy
from crawlherd.errors import AddressNotAllowedError, FetchError
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.browser import BrowserFetcher, BrowserOptions
from crawlherd.fetch.socks_relay import SocksRelay, needs_relay
from crawlherd.request import Request

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

LOOPBACK = FetchLimits(allow_private_addresses=True, total_timeout=40)


@pytest.fixture
async def site() -> AsyncIterator[DemoSite]:
    async with DemoSite(throttle_every=0) as demo:
        yield demo


@pytest.fixture
async def socks() -> AsyncIterator[LoopbackProxy]:
    async with await start_socks5_proxy("127.0.0.3", auth="bob:s3cret-socks") as proxy:
        yield proxy


def _session(proxy: str) -> dict[str, object]:
    return {"crawlherd.session": {"id": "s-socks", "proxy": proxy}}


async def test_a_session_through_socks5_with_credentials(
    site: DemoSite, socks: LoopbackProxy, shared_chromium: str
) -> None:
    assert needs_relay(socks.url) and not needs_relay("socks5://127.0.0.1:1080")
    options = BrowserOptions(cdp_url=shared_chromium, wait_until="load")
    async with BrowserFetcher(LOOPBACK, options) as fetcher:
        response = await fetcher.fetch(Request(f"{site.url}/ip", meta=_session(socks.url)))
        assert '"origin": "127.0.0.3"' in response.text  # the site saw the SOCKS proxy
        (relay,) = fetcher._relays.values()  # noqa: SLF001 - the relay it made
        again = await fetcher.fetch(Request(f"{site.url}/ip?again", meta=_session(socks.url)))
        assert '"origin": "127.0.0.3"' in again.text
        # wrong credentials: a FetchError that does not show them
        wrong = socks.url.replace("s3cret-socks", "wrong-pw")
        with pytest.raises(FetchError) as info:
            await fetcher.fetch(Request(f"{site.url}/ip", meta={"crawlherd.session": {"id": "s-bad", "proxy": wrong}}))
        assert "wrong-pw" not in str(info.value)
    host = site.url.removeprefix("http://")
    assert socks.requests and all(line == f"SOCKS5 CONNECT {host}" for line, _ in socks.requests)
    with pytest.raises(ConnectionRefusedError):  # the relay is gone with the browser
        await asyncio.open_connection("127.0.0.1", relay.port)


async def test_the_browsers_own_proxy_through_socks5_with_credentials(
    site: DemoSite, socks: LoopbackProxy, shared_chromium: str
) -> None:
    options = BrowserOptions(cdp_url=shared_chromium, wait_until="load", proxy=socks.url)
    async with BrowserFetcher(LOOPBACK, options) as fetcher:
        response = await fetcher.fetch(Request(f"{site.url}/ip"))
    assert '"origin": "127.0.0.3"' in response.text and socks.seen >= 1
    assert "s3cret-socks" not in repr(options)


async def test_the_relay_refuses_a_target_the_guard_refuses(site: DemoSite, socks: LoopbackProxy) -> None:
    async def no_private(host: str, port: int, url: str) -> None:
        raise AddressNotAllowedError(f"{url}: private", url=url)

    relay = await SocksRelay(socks.url, no_private).start()
    try:
        # another local process using the relay's port reaches nothing the guard refuses
        with pytest.raises(ProxyError):
            await Proxy.from_url(relay.url).connect("127.0.0.1", int(site.url.rsplit(":", 1)[1]), timeout=10)
    finally:
        await relay.close()
    assert socks.seen == 0
