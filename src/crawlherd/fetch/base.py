"""The fetcher protocol: one request in, one :class:`Response` out, or a :class:`FetchError`.

Every fetcher (``HttpFetcher`` on aiohttp, ``BrowserFetcher`` on Playwright + system Chromium)
enforces the same :class:`FetchLimits`: timeouts, maximum body size, maximum redirects, a content-type
allow-list and the address guard (:mod:`crawlherd.fetch.guard`).

Every fetcher also honours a per-host send gate (``send_gate``, :mod:`crawlherd.fetch.gate`).

Per-request overrides travel in ``Request.meta`` (JSON-safe, so they survive a persistent frontier):
``"crawlherd.timeouts": {"connect": s, "read": s, "total": s}`` (read with :meth:`Timeouts.of`) and
``"crawlherd.session": {...}`` (the session a request is fetched under: its proxy, headers and cookies,
:mod:`crawlherd.fetch.session`; every fetcher honours it) and
``"crawlherd.screenshot": True`` (fetchers whose ``takes_screenshots`` is True, the browser's; the
Crawler warns when a run asks another for screenshots). ``Request.headers`` are sent on top of the
fetcher's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from crawlherd.content_type import HasBody, media_type
from crawlherd.errors import ConfigurationError, ContentTypeError
from crawlherd.fetch.gate import SendGate
from crawlherd.request import Request
from crawlherd.result import CrawlResult

__all__ = ["DEFAULT_CONTENT_TYPES", "FetchLimits", "Fetcher", "Response", "Timeouts", "result_of_fetch"]

#: What fetchers accept by default: HTML and XHTML, plain text, JSON and XML.
DEFAULT_CONTENT_TYPES: tuple[str, ...] = (
    "text/html", "application/xhtml+xml", "text/plain", "application/json", "application/xml", "text/xml",
)


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """Limits every fetcher enforces. ``allowed_content_types`` empty means any type."""

    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    total_timeout: float = 60.0
    max_body_size: int = 10 * 1024 * 1024
    max_redirects: int = 10
    allowed_content_types: tuple[str, ...] = DEFAULT_CONTENT_TYPES
    allow_private_addresses: bool = False
    user_agent: str = "crawlherd/0.1"
    #: Private networks let through even when ``allow_private_addresses`` is False ("127.0.0.1/32").
    allowed_networks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"FetchLimits.{name}={getattr(self, name)!r}: must be > 0 seconds")
        if self.max_body_size < 1:
            raise ConfigurationError(f"FetchLimits.max_body_size={self.max_body_size!r}: must be >= 1 byte")
        if self.max_redirects < 0:
            raise ConfigurationError(f"FetchLimits.max_redirects={self.max_redirects!r}: must be >= 0")
        from crawlherd.fetch.guard import parse_networks

        try:
            parse_networks(self.allowed_networks)
        except ValueError as exc:
            raise ConfigurationError(f"FetchLimits.allowed_networks: {exc}") from None

    def check_content_type(self, content_type: str, *, url: str, request: Request | None = None) -> None:
        """Raise ContentTypeError when the media type of ``content_type`` (a header value) is not in
        ``allowed_content_types``. Every fetcher calls it on a final response below 400; nothing
        declared passes (the caller then sees an empty content type), as does anything when the
        allow-list is empty."""
        allowed = self.allowed_content_types
        mime = media_type(content_type)
        if allowed and mime and mime not in allowed:
            raise ContentTypeError(
                f"{url}: content type {mime!r} is not allowed (allowed: {', '.join(allowed)})", url=url, request=request
            )


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The timeouts of one request, in seconds: the limits', with ``meta["crawlherd.timeouts"]`` over them."""

    connect: float
    read: float
    total: float

    @classmethod
    def of(cls, request: Request, limits: FetchLimits) -> Timeouts:
        t = request.meta.get("crawlherd.timeouts") if request.meta else None
        if not t:
            return cls(limits.connect_timeout, limits.read_timeout, limits.total_timeout)
        return cls(
            float(t.get("connect") or limits.connect_timeout),
            float(t.get("read") or limits.read_timeout),
            float(t.get("total") or limits.total_timeout),
        )


@dataclass(slots=True)
class Response(HasBody):
    """What a fetch returned. ``url`` is the final URL after redirects; ``headers`` keys are lower-case;
    ``encoding`` the charset of the ``content-type`` header (:func:`crawlherd.content_type.charset_of`).
    ``text`` and ``content_type`` come from :class:`~crawlherd.content_type.HasBody`. ``cookies``: the
    cookies the site set while a request under a session (``meta["crawlherd.session"]``) was fetched,
    each ``{"name", "value", "domain", "path"}``."""

    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    request: Request
    elapsed: float = 0.0
    redirects: tuple[str, ...] = ()
    screenshot: bytes | None = None
    encoding: str = field(default="utf-8")
    #: The cookies the site set (every redirect hop included) when the request was fetched under a
    #: session (``meta["crawlherd.session"]``, :mod:`crawlherd.fetch.session`): a list of
    #: ``{"name", "value", "domain", "path"}`` dicts.
    cookies: list[dict[str, str]] = field(default_factory=list)


@runtime_checkable
class Fetcher(Protocol):
    """Fetches one request. An async context manager; ``close`` releases its pool / browser.

    ``send_gate`` (None by default) is the per-host send gate (:mod:`crawlherd.fetch.gate`): when set,
    the fetcher awaits :func:`~crawlherd.fetch.gate.pass_gate` with the request's politeness key
    (``Request.host``; for a redirect hop, the key of that hop's URL) as late as it can before each
    request -- every redirect hop too -- is sent. The :class:`~crawlherd.crawler.Crawler` sets it
    before the first fetch.

    ``takes_screenshots``: True when the fetcher renders pages and honours
    ``meta["crawlherd.screenshot"]`` (``Response.screenshot`` a PNG); the crawler warns when a run
    asks for screenshots of a fetcher that cannot take them.

    ``fetch_result(request)``, awaitable: the same fetch, answered as the
    :class:`~crawlherd.result.CrawlResult` the crawler reports -- what the crawler calls.
    :func:`result_of_fetch` is the plain implementation (``fetch``, then the result of its Response);
    ``HttpFetcher`` builds the result straight from the aiohttp response, unless a subclass (or the
    instance) replaced ``fetch`` alone, which is then honoured.
    """

    limits: FetchLimits
    send_gate: SendGate | None
    takes_screenshots: bool

    async def __aenter__(self) -> Fetcher: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def fetch(self, request: Request) -> Response:
        """Fetch ``request`` within :attr:`limits`. Any status code is a Response (the caller decides
        what 429 or 404 mean); transport problems and broken limits raise a FetchError subclass."""
        ...

    def fetch_result(self, request: Request) -> Awaitable[CrawlResult]:
        """:meth:`fetch`, answered as the :class:`~crawlherd.result.CrawlResult` of its Response (the
        same status, final URL, headers, body, encoding, timing, redirects and screenshot; the same
        errors raised)."""
        ...

    async def close(self) -> None:
        """Release the connection pool or browser. Idempotent."""
        ...


async def result_of_fetch(fetcher: Fetcher, request: Request) -> CrawlResult:
    """``fetcher.fetch(request)`` as the :class:`~crawlherd.result.CrawlResult` the crawler reports:
    the plain ``fetch_result`` of a fetcher."""
    r = await fetcher.fetch(request)
    result = CrawlResult.fetched(
        request, r.url, r.status, r.headers, r.body, r.encoding, r.elapsed, r.redirects, r.screenshot
    )
    if r.cookies:
        result.cookies = r.cookies
    return result
