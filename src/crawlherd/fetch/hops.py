"""One hop at a time: redirect following and the response limits, in one place for every fetcher.

A fetcher sends one request -- one *hop* -- and says what came back as a :class:`Hop`: a redirect (a
3xx with a ``Location``) or the final answer. It never follows a redirect itself. :func:`follow`
drives the hops of one fetch:

- before each hop it runs the address guard on the hop's URL (every hop, redirects included) and
  hands the fetcher the hop's politeness key for the send gate (``Request.host``, then
  :func:`~crawlherd.fetch.gate.hop_host` of each redirect target);
- after a redirect it counts the hop against ``max_redirects`` (:class:`TooManyRedirectsError`),
  resolves the ``Location`` (an HTTP(S) URL only) and turns a 303, or a 301/302 of a POST, into a GET;
- an error a hop raises is given the fetch's request and the hop's URL.

The response limits a hop applies to a final answer, as it comes in:

- :class:`AcceptedTypes`: the content-type allow-list of a response below 400 (and its charset);
- :func:`check_length`: a declared ``Content-Length`` over ``max_body_size``, refused before reading;
- :func:`read_body`: the body streamed, and decompressed here (gzip, deflate), so that the
  *decompressed* bytes count against ``max_body_size``: a gzip bomb stops after that many bytes of
  output;
- :func:`check_size`: a body read whole (a browser's, a mock's) over ``max_body_size``.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol
from urllib.parse import urljoin

from crawlherd.content_type import charset_of
from crawlherd.errors import (
    AddressNotAllowedError,
    BodyTooLargeError,
    FetchError,
    InvalidURLError,
    TooManyRedirectsError,
)
from crawlherd.fetch.base import FetchLimits, Response
from crawlherd.fetch.gate import hop_host
from crawlherd.request import Request

__all__ = [
    "REDIRECT_STATUSES", "AcceptedTypes", "Guard", "Hop", "SendHop", "blame", "check_length", "check_size", "follow",
    "read_body", "redirect_location", "response_of",
]

#: The statuses that redirect (with a ``Location``).
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_ACCEPTED_TYPES = 256  # distinct accepted Content-Type values remembered (then forgotten all at once)


@dataclass(slots=True, repr=False, eq=False)
class Hop:
    """What one hop answered: ``Hop(status, location=None, url="", headers={}, body=b"",
    encoding="utf-8", screenshot=None, raw=None)``. A redirect has its ``location`` (as sent, maybe
    relative) and nothing else; a final answer has ``location=None``, its ``url`` (empty: the hop's
    own), ``headers``, ``body``, the charset ``encoding`` and, from a browser, a ``screenshot``.
    ``raw`` is the fetcher's own response object, when it needs it back. :func:`follow` sets
    ``elapsed`` and ``redirects``."""

    status: int
    location: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)
    body: bytes = b""
    encoding: str = "utf-8"
    screenshot: bytes | None = None
    raw: Any = None
    elapsed: float = 0.0
    redirects: tuple[str, ...] = ()

    def __repr__(self) -> str:
        if self.location is not None:
            return f"<Hop {self.status} -> {self.location}>"
        return f"<Hop {self.status} {self.url} {len(self.body)} bytes>"


#: ``send(url, method, body, host)``: make one hop (``host``: its politeness key, "" without a
#: request) and answer what came back; a transport problem or a broken limit raises a FetchError.
SendHop = Callable[[str, str, "bytes | None", str], Awaitable[Hop]]
#: ``guard(url)``: raise AddressNotAllowedError to refuse a hop; None or an awaitable to wait on.
Guard = Callable[[str], "Awaitable[None] | None"]


def redirect_location(status: int, location: str | None) -> str | None:
    """``location`` when ``status`` redirects to it, else None (a final answer)."""
    return location if location and status in REDIRECT_STATUSES else None


async def follow(
    send: SendHop,
    request: Request | None,
    limits: FetchLimits,
    *,
    url: str = "",
    method: str = "GET",
    guard: Guard | None = None,
    guard_first: bool = True,
    answered: Hop | None = None,
    started: float | None = None,
) -> Hop:
    """Make the hops of one fetch with ``send`` until a final answer, and return it (its ``url``,
    ``elapsed`` and ``redirects`` filled in). The chain starts at ``request`` (its URL, method and
    body; errors carry it), or without one (a page's own sub-resource) at ``url`` with ``method``.
    ``guard`` checks every hop's URL before it is sent; ``guard_first=False`` when the caller checked
    the first one already. ``answered``: what the first hop already answered (a fetcher that makes
    the first hop itself, to spare a page that is not redirected this loop), the fetch having
    begun at ``started`` (``time.perf_counter()``)."""
    body: bytes | None = None
    host = ""
    if request is not None:
        url, method, body, host = request.url, request.method, request.body, request.host
    first = url
    if started is None:
        started = time.perf_counter()
    redirects: list[str] = []
    hop = answered
    while True:
        if hop is None:
            try:
                if guard is not None and (guard_first or redirects):
                    checked = guard(url)
                    if checked is not None:
                        await checked
                hop = await send(url, method, body, host)
            except FetchError as exc:
                blame(exc, url, request)
                raise
        location = hop.location
        if location is None:
            hop.elapsed = time.perf_counter() - started
            hop.redirects = tuple(redirects)
            if not hop.url:
                hop.url = url
            return hop
        if len(redirects) >= limits.max_redirects:
            raise TooManyRedirectsError(
                f"{url}: more than max_redirects={limits.max_redirects} redirects (started at {first})",
                url=first,
                request=request,
            )
        redirects.append(url)
        target = urljoin(url, location.strip())
        if not target.startswith(("http://", "https://")):
            raise FetchError(f"{url}: redirect to a non-HTTP URL {target[:200]!r}", url=url, request=request)
        if hop.status == 303 or (hop.status in (301, 302) and method == "POST"):
            method, body = "GET", None
        if request is not None:
            try:
                host = hop_host(target)
            except InvalidURLError as exc:
                raise FetchError(f"{url}: redirect to an invalid URL ({exc})", url=url, request=request) from None
        url = target
        hop = None


def blame(exc: FetchError, url: str, request: Request | None) -> None:
    """An error of a hop names the fetch's request and the hop's URL (a resolver's refusal names only
    the host it resolved)."""
    if exc.request is None:
        exc.request = request
    if exc.url is None or (isinstance(exc, AddressNotAllowedError) and exc.url != url):
        exc.url = url


def response_of(request: Request, hop: Hop) -> Response:
    """The :class:`~crawlherd.fetch.base.Response` of a fetch that ended with ``hop``."""
    return Response(
        hop.url, hop.status, hop.headers, hop.body, request, hop.elapsed, hop.redirects, hop.screenshot, hop.encoding
    )


# -- the response limits ------------------------------------------------------------------------------


class AcceptedTypes:
    """The content-type allow-list of :class:`~crawlherd.fetch.base.FetchLimits`, applied to final
    answers below 400, with the charset of each Content-Type value that passed remembered: a site
    sends a handful of distinct values, each parsed once (per ``limits`` object: new limits, new
    answers). One per fetcher."""

    __slots__ = ("_accepted", "_limits")

    def __init__(self) -> None:
        self._accepted: dict[str, str] = {}
        self._limits: FetchLimits | None = None

    def charset(self, limits: FetchLimits, content_type: str, status: int, url: str, request: Request | None) -> str:
        """The charset of ``content_type`` (a header value), after the allow-list check for a status
        below 400 (which raises ContentTypeError)."""
        if status >= 400:
            return charset_of(content_type)
        accepted = self._accepted
        if self._limits is limits:
            charset = accepted.get(content_type)
            if charset is not None:
                return charset
        limits.check_content_type(content_type, url=url, request=request)
        charset = charset_of(content_type)
        if len(accepted) >= _ACCEPTED_TYPES or self._limits is not limits:  # full, or other limits now
            accepted.clear()
            self._limits = limits
        accepted[content_type] = charset
        return charset


def check_length(limits: FetchLimits, length: int | None, url: str, request: Request | None) -> None:
    """Refuse a declared ``Content-Length`` over ``max_body_size`` before anything is read."""
    if length is not None and length > limits.max_body_size:
        raise BodyTooLargeError(
            f"{url}: Content-Length {length} is over max_body_size={limits.max_body_size}", url=url, request=request
        )


def check_size(limits: FetchLimits, size: int, url: str, request: Request | None, what: str = "body") -> None:
    """Refuse a body read whole (``what`` names it in the message) over ``max_body_size``."""
    if size > limits.max_body_size:
        raise BodyTooLargeError(
            f"{url}: {what} is {size} bytes, over max_body_size={limits.max_body_size}", url=url, request=request
        )


class ChunkStream(Protocol):
    """A body arriving in chunks (aiohttp's ``StreamReader``)."""

    async def readany(self) -> bytes: ...

    def at_eof(self) -> bool: ...


async def read_body(
    limits: FetchLimits,
    stream: ChunkStream,
    content_encoding: str | None,
    url: str,
    request: Request | None,
    progress: list[float] | None = None,
) -> bytes:
    """The body of ``stream``, decoded from its ``Content-Encoding`` (gzip, deflate or none), aborted
    as soon as it -- decompressed -- passes ``max_body_size``. ``progress[0]`` is set to the time of
    each chunk received (the HTTP fetcher's read-timeout watchdog)."""
    if content_encoding and content_encoding != "identity":
        return await _read_decoded(limits, stream, content_encoding.strip().lower(), url, request, progress)
    limit = limits.max_body_size
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.readany():
        if progress is not None:
            progress[0] = time.monotonic()
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(
                f"{url}: body is over max_body_size={limit} bytes; aborted", url=url, request=request
            )
        chunks.append(chunk)
        if stream.at_eof():
            break  # all in: no readany() just to be told so
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _read_decoded(
    limits: FetchLimits,
    stream: ChunkStream,
    encoding: str,
    url: str,
    request: Request | None,
    progress: list[float] | None,
) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        decoder: Any = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)  # zlib or gzip header, auto-detected
    else:
        raise FetchError(f"{url}: unsupported Content-Encoding {encoding!r}", url=url, request=request)
    limit = limits.max_body_size
    out: list[bytes] = []
    size = 0
    try:
        while chunk := await stream.readany():
            if progress is not None:
                progress[0] = time.monotonic()
            while chunk:
                data = decoder.decompress(chunk, limit - size + 1)
                size += len(data)
                if size > limit:
                    raise BodyTooLargeError(
                        f"{url}: decompressed body is over max_body_size={limit} bytes (decompression bomb?); aborted",
                        url=url,
                        request=request,
                    )
                out.append(data)
                chunk = decoder.unconsumed_tail
        out.append(decoder.flush())
    except zlib.error as exc:
        raise FetchError(f"{url}: corrupt {encoding} body ({exc})", url=url, request=request) from None
    return b"".join(out)
