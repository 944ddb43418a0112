"""``MockFetcher``: the in-package test double of the fetcher plug-point, like httpx's ``MockTransport``.

A handler function answers each request -- ``MockResponse`` (or a full ``Response``), sync or async,
or an exception it raises (a :class:`~crawlherd.errors.FetchError` subclass to stand for a transport
problem) -- and the fetcher keeps the :class:`~crawlherd.fetch.base.Fetcher` contract around it, so
code tested with it meets the same behaviour as with the real fetchers::

    def handler(request: Request) -> MockResponse:
        if request.url.endswith("/robots.txt"):
            return MockResponse(404)
        return MockResponse(200, "<a href='/next'>next</a>", content_type="text/html")

    async with Crawler(fetcher=MockFetcher(handler)) as crawler:
        ...

What it enforces, as every fetcher does (:class:`~crawlherd.fetch.base.FetchLimits`): the address
guard on IP-literal hosts (it resolves no names: a host name counts as public), redirects (3xx with a
``Location``, at most ``max_redirects``, 303 turns into GET) each hop asked of the handler again,
``total_timeout`` (per request via ``meta["crawlherd.timeouts"]``) around an async handler, the body
cap, the content-type allow-list (below 400) and the charset of the ``content-type`` header. It
awaits the send gate before every hop. ``requests`` records every request the handler saw, in order.
The redirect loop and the limits are :mod:`crawlherd.fetch.hops`'s, as for the real fetchers: this
fetcher makes one hop, asking its handler.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from crawlherd.content_type import charset_of
from crawlherd.errors import FetchError, FetchTimeoutError
from crawlherd.fetch.base import FetchLimits, Response, Timeouts, result_of_fetch
from crawlherd.fetch.gate import SendGate, check_veto, pass_gate
from crawlherd.fetch.guard import address_allowed, parse_networks, refusal
from crawlherd.fetch.hops import AcceptedTypes, Hop, check_size, follow, redirect_location, response_of
from crawlherd.request import Request
from crawlherd.result import CrawlResult

__all__ = ["MockFetcher", "MockHandler", "MockResponse"]


@dataclass(frozen=True, slots=True)
class MockResponse:
    """What a handler answers: ``MockResponse(status=200, body=b"", headers=None, *, content_type=None)``.
    A ``str`` body is encoded with the ``content_type``'s charset (UTF-8 without one);
    ``content_type`` is a shorthand for the ``content-type`` header."""

    status: int = 200
    body: bytes | str = b""
    headers: Mapping[str, str] | None = None
    content_type: str | None = None

    def header_map(self) -> dict[str, str]:
        headers = {k.lower(): v for k, v in (self.headers or {}).items()}
        if self.content_type is not None:
            headers["content-type"] = self.content_type
        return headers


#: ``handler(request)``: a MockResponse or Response, or an awaitable of one; raises to fail the fetch.
MockHandler = Callable[[Request], "MockResponse | Response | Awaitable[MockResponse | Response]"]


class MockFetcher:
    """A :class:`~crawlherd.fetch.base.Fetcher` whose answers come from ``handler``.

    ``MockFetcher(handler, limits=None)``. ``requests``: every request handed to the handler (redirect
    hops included); ``entered`` / ``closed``: its lifecycle, as the owner drove it.
    """

    #: It renders nothing: no screenshots.
    takes_screenshots = False

    def __init__(self, handler: MockHandler, limits: FetchLimits | None = None) -> None:
        if not callable(handler):
            raise TypeError(f"MockFetcher handler must be callable, got {handler!r}")
        self.handler = handler
        self.limits = limits or FetchLimits()
        self._networks = parse_networks(self.limits.allowed_networks)
        self._types = AcceptedTypes()
        self.send_gate: SendGate | None = None
        self.requests: list[Request] = []
        self.entered = False
        self.closed = False

    def __repr__(self) -> str:
        return f"<MockFetcher handler={self.handler!r} requests={len(self.requests)}>"

    @property
    def urls(self) -> list[str]:
        """The URLs of :attr:`requests`."""
        return [r.url for r in self.requests]

    async def __aenter__(self) -> MockFetcher:
        if self.closed:
            raise FetchError("this MockFetcher is closed; create a new one")
        self.entered = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        self.closed = True

    def fetch_result(self, request: Request) -> Awaitable[CrawlResult]:
        """:meth:`fetch`, answered as a :class:`~crawlherd.result.CrawlResult`."""
        return result_of_fetch(self, request)

    async def fetch(self, request: Request) -> Response:
        if self.closed:
            raise FetchError("this MockFetcher is closed; create a new one", url=request.url, request=request)
        total = Timeouts.of(request, self.limits).total
        try:
            async with asyncio.timeout(total):
                return await self._fetch(request)
        except TimeoutError:
            raise FetchTimeoutError(f"{request.url}: total timeout ({total:g} s)", url=request.url,
                                    request=request) from None

    async def _fetch(self, request: Request) -> Response:
        hop = await follow(functools.partial(self._hop, request), request, self.limits, guard=self._guard)
        return response_of(request, hop)

    async def _hop(self, request: Request, url: str, method: str, body: bytes | None, host: str) -> Hop:
        """One hop: the handler asked, its answer held to the limits (:mod:`crawlherd.fetch.hops`)."""
        await pass_gate(self.send_gate, host)
        check_veto(url)
        if url != request.url or method != request.method:
            request = request.replace(url=url, method=method, body=body)
        self.requests.append(request)
        answer = self.handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        status, headers, content = _unpack(answer)
        location = redirect_location(status, headers.get("location"))
        if location is not None:
            return Hop(status, location)
        limits = self.limits
        charset = self._types.charset(limits, headers.get("content-type", ""), status, url, request)
        check_size(limits, len(content), url, request)
        return Hop(status, None, url, headers, content, charset)

    def _guard(self, url: str) -> None:
        if self.limits.allow_private_addresses:
            return
        host = urlsplit(url).hostname or ""
        try:
            allowed = address_allowed(host, self._networks)
        except ValueError:
            return  # a name, not an address: the mock resolves nothing
        if not allowed:
            raise refusal(url, host, host)


def _unpack(answer: MockResponse | Response) -> tuple[int, dict[str, str], bytes]:
    if isinstance(answer, Response):
        return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.body
    if not isinstance(answer, MockResponse):
        raise TypeError(f"a MockFetcher handler must return a MockResponse or a Response, got {answer!r:.100}")
    headers = answer.header_map()
    body = answer.body
    if isinstance(body, str):
        body = body.encode(charset_of(headers.get("content-type", "")), errors="replace")
    return answer.status, headers, body
