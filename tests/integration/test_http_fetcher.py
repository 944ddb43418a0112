"""HttpFetcher against the misbehaving local server: every limit, and errors translated."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from crawlherd.errors import (
    AddressNotAllowedError,
    BodyTooLargeError,
    ContentTypeError,
    FetchError,
    FetchTimeoutError,
    TooManyRedirectsError,
)
from crawlherd.fetch.base import Fetcher, FetchLimits
from crawlherd.fetch.http import HttpFetcher
from crawlherd.request import Request
from tests.servers.misbehaving import MisbehavingServer
from tests.support.processes import wait_until

LOOPBACK = FetchLimits(allow_private_addresses=True, max_body_size=1_000_000, max_redirects=5)


@pytest.fixture
async def server() -> AsyncIterator[MisbehavingServer]:
    async with MisbehavingServer() as s:
        yield s


@pytest.fixture
async def fetcher() -> AsyncIterator[HttpFetcher]:
    async with HttpFetcher(LOOPBACK) as f:
        yield f
    assert f._session is None  # released


def test_is_a_fetcher() -> None:
    assert isinstance(HttpFetcher(), Fetcher)


async def test_page(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(Request(server.url + "/page/1"))
    assert r.status == 200 and r.content_type == "text/html" and "page 1" in r.text
    assert r.headers["content-type"].startswith("text/html")
    assert r.url == server.url + "/page/1" and r.redirects == ()


async def test_one_shared_connection_pool(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    for i in range(5):
        await fetcher.fetch(Request(f"{server.url}/page/{i}"))
    session = fetcher._session
    assert session is not None
    for i in range(5):
        await fetcher.fetch(Request(f"{server.url}/page/{i}"))
    assert fetcher._session is session
    assert len(session.connector._conns) == 1  # type: ignore[union-attr]  # one keep-alive connection reused


async def test_redirect_chain_is_followed(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(Request(server.url + "/redirect/chain/3"))
    assert r.status == 200 and r.url == server.url + "/redirect/chain/0"
    assert len(r.redirects) == 3


async def test_endless_redirects_stop_at_max_redirects(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    with pytest.raises(TooManyRedirectsError, match="max_redirects=5"):
        await fetcher.fetch(Request(server.url + "/redirect/loop"))
    assert len(server.hits_for("/redirect/loop")) == 6


@pytest.mark.parametrize("declared", [False, True])
async def test_huge_body_is_aborted(server: MisbehavingServer, fetcher: HttpFetcher, declared: bool) -> None:
    url = server.url + "/huge?size=50000000" + ("&cl=1" if declared else "")
    with pytest.raises(BodyTooLargeError, match="max_body_size=1000000"):
        await fetcher.fetch(Request(url))


async def test_gzip_is_decoded(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(Request(server.url + "/gzip"))
    assert r.text.count("compressed") == 100


async def test_gzip_bomb_is_stopped_by_counting_decompressed_bytes(
    server: MisbehavingServer, fetcher: HttpFetcher
) -> None:
    # ~50 KB on the wire, 50 MB once inflated.
    with pytest.raises(BodyTooLargeError, match="decompression bomb"):
        await fetcher.fetch(Request(server.url + "/gzip-bomb?size=50000000"))


async def test_content_type_allow_list(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    with pytest.raises(ContentTypeError, match="image/png"):
        await fetcher.fetch(Request(server.url + "/binary"))
    async with HttpFetcher(dataclasses.replace(LOOPBACK, allowed_content_types=())) as anything:
        assert (await anything.fetch(Request(server.url + "/binary"))).body.startswith(b"\x89PNG")


async def test_error_statuses_are_responses_not_errors(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    r = await fetcher.fetch(Request(server.url + "/always/503?after=5"))
    assert r.status == 503 and r.headers["retry-after"] == "5"


async def test_total_timeout_on_a_slow_drip(server: MisbehavingServer) -> None:
    limits = dataclasses.replace(LOOPBACK, total_timeout=0.5)
    async with HttpFetcher(limits) as f:
        with pytest.raises(FetchTimeoutError, match="total timeout"):
            await f.fetch(Request(server.url + "/slow?interval=0.1&count=100"))


async def test_read_timeout_on_a_stall_per_request(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    req = Request(server.url + "/stall", meta={"crawlherd.timeouts": {"read": 0.3}})
    with pytest.raises(FetchTimeoutError, match="read timeout"):
        await fetcher.fetch(req)


async def reading(server: MisbehavingServer, fetcher: HttpFetcher, task: asyncio.Task[object]) -> bool:
    """The stalled request reached the server and its fetch is being watched."""
    return bool(server.hits_for("/stall")) and task in fetcher._watch


async def test_a_stop_that_comes_with_a_read_timeout_stops_the_fetch(
    server: MisbehavingServer, fetcher: HttpFetcher
) -> None:
    """The watchdog's cancellation of a stalled read and a stop's in the same turn: the fetch is
    cancelled (the stop goes on), not turned into a read timeout -- a page task that took the stop for
    a timeout went on with the next page, and its run's stop waited for it."""
    req = Request(server.url + "/stall?seconds=3600", meta={"crawlherd.timeouts": {"read": 3600}})
    task = asyncio.create_task(fetcher.fetch(req))
    await wait_until(lambda: reading(server, fetcher, task), deadline=30)
    await asyncio.sleep(0.05)  # the response's headers read: the fetch waits for its body
    fetcher._stalled[task] = "read"  # what the read watchdog does on a stall ...
    task.cancel()
    task.cancel()  # ... and a stop, before the task runs again
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_read_timeout_alone_is_a_read_timeout(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    req = Request(server.url + "/stall?seconds=3600", meta={"crawlherd.timeouts": {"read": 3600}})
    task = asyncio.create_task(fetcher.fetch(req))
    await wait_until(lambda: reading(server, fetcher, task), deadline=30)
    fetcher._stalled[task] = "read"
    task.cancel()
    with pytest.raises(FetchTimeoutError, match="read timeout"):
        await task


async def test_connection_reset_is_a_fetch_error(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    with pytest.raises(FetchError) as info:
        await fetcher.fetch(Request(server.url + "/reset"))
    assert type(info.value) is FetchError and info.value.url == server.url + "/reset"


async def test_refused_connection_is_a_fetch_error(fetcher: HttpFetcher) -> None:
    with pytest.raises(FetchError, match=r"^http://127\.0\.0\.1:1/: connection refused by 127\.0\.0\.1:1$"):
        await fetcher.fetch(Request("http://127.0.0.1:1/"))


# -- the address guard ------------------------------------------------------------------------------


async def test_guard_refuses_loopback_literals_and_names(server: MisbehavingServer) -> None:
    async with HttpFetcher() as f:
        with pytest.raises(AddressNotAllowedError, match="--allow-private"):
            await f.fetch(Request(server.url + "/page/1"))
        with pytest.raises(AddressNotAllowedError, match="localhost resolves to"):
            await f.fetch(Request(f"http://localhost:{server.ports[0]}/page/1"))
    assert server.hits == []  # refused before any connection


async def test_guard_runs_on_every_redirect_hop() -> None:
    # The server listens on 127.0.0.2 and only 127.0.0.2/32 is allowed: every hop elsewhere is refused,
    # by IP literal (checked before connecting) or by name (checked on the resolver's answer).
    limits = FetchLimits(allowed_networks=("127.0.0.2/32",))
    async with MisbehavingServer(host="127.0.0.2") as server, HttpFetcher(limits) as f:
        port = server.ports[0]
        ok = await f.fetch(Request(server.url + "/page/1"))
        assert ok.status == 200  # the allowed network is let through
        for target in (f"http://127.0.0.1:{port}/page/1", f"http://localhost:{port}/page/1", "http://10.1.2.3/"):
            with pytest.raises(AddressNotAllowedError) as info:
                await f.fetch(Request(f"{server.url}/redirect/to?url={target}"))
            assert info.value.url == target
        assert [h.path for h in server.hits] == ["/page/1", "/redirect/to", "/redirect/to", "/redirect/to"]


def test_bad_limits_are_refused() -> None:
    from crawlherd.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="allowed_networks"):
        FetchLimits(allowed_networks=("not-a-network",))
    with pytest.raises(ConfigurationError, match="total_timeout"):
        FetchLimits(total_timeout=0)


@pytest.mark.parametrize(
    "path", ["/page/1", "/redirect/chain/2", "/gzip", "/always/503?after=5", "/always/404", "/size/70000"]
)
async def test_fetch_result_answers_as_fetch_does(server: MisbehavingServer, fetcher: HttpFetcher, path: str) -> None:
    """The crawler's short path (a CrawlResult built from the aiohttp response) says what fetch says."""
    request = Request(server.url + path)
    response = await fetcher.fetch(request)
    result = await fetcher.fetch_result(request)
    assert (result.url, result.request, result.depth) == (request.url, request, 0)
    assert (result.final_url, result.status_code, result.body, result.encoding, result.redirects) == (
        response.url, response.status, response.body, response.encoding, response.redirects
    )
    assert result.success is (response.status < 400)
    assert result.error_message == (None if response.status < 400 else f"HTTP {response.status}")
    assert dict(result.headers) == dict(response.headers) and result.headers == response.headers
    assert result.content_type == response.content_type and result.text == response.text


async def test_an_accepted_content_type_lets_no_other_through(server: MisbehavingServer, fetcher: HttpFetcher) -> None:
    """Accepted Content-Type values are remembered (parsed once each): that must not let another one by."""
    for _ in range(2):
        assert (await fetcher.fetch_result(Request(server.url + "/page/1"))).success
        with pytest.raises(ContentTypeError, match="image/png"):
            await fetcher.fetch_result(Request(server.url + "/binary"))
        with pytest.raises(BodyTooLargeError):
            await fetcher.fetch_result(Request(server.url + "/huge?size=50000000"))


def test_response_headers_are_lower_case_and_the_last_repeat_wins() -> None:
    import copy
    import pickle

    from multidict import CIMultiDict, CIMultiDictProxy

    from crawlherd.fetch.http import ResponseHeaders

    raw = CIMultiDictProxy(CIMultiDict([("Content-Type", "text/html"), ("Set-Cookie", "a=1"), ("set-cookie", "b=2")]))
    first = ResponseHeaders(raw)  # one header asked for before any copy: the same answers
    assert first.get("set-cookie") == "b=2" and first.get("Content-Type") is None and first.get("x", "-") == "-"
    headers = ResponseHeaders(raw)
    assert headers == {"content-type": "text/html", "set-cookie": "b=2"}
    assert headers["set-cookie"] == "b=2" and headers.get("Content-Type") is None and "content-type" in headers
    assert list(headers) == ["content-type", "set-cookie"] and len(headers) == 2
    plain = {"content-type": "text/html", "set-cookie": "b=2"}
    assert pickle.loads(pickle.dumps(headers)) == copy.copy(headers) == plain
    assert type(pickle.loads(pickle.dumps(headers))) is dict


async def test_new_limits_are_obeyed_at_once(server: MisbehavingServer) -> None:
    async with HttpFetcher(dataclasses.replace(LOOPBACK, allowed_content_types=())) as fetcher:
        assert (await fetcher.fetch(Request(server.url + "/binary"))).status == 200
        fetcher.limits = LOOPBACK  # the image/png accepted a moment ago is not any more
        with pytest.raises(ContentTypeError, match="image/png"):
            await fetcher.fetch(Request(server.url + "/binary"))
