"""The fetcher protocol: one request in, one :class:`Response` out, or a :class:`FetchError`.

Every fetcher (``HttpFetcher`` on aiohttp, ``BrowserFetcher`` on Playwright + system Chromium)
enforces the same :class:`FetchLimits`: timeouts, maximum body size, maximum redirects, a content-type
allow-list and the address guard (:mod:`crawlherd.fetch.guard`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from crawlherd.request import Request

__all__ = ["DEFAULT_CONTENT_TYPES", "FetchLimits", "Fetcher", "Response"]

DEFAULT_CONTENT_TYPES: tuple[str, ...] = (
    "text/html",
    "application/xhtml+xml",
    "text/plain",
    "application/json",
    "application/xml",
    "text/xml",
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


@dataclass(slots=True)
class Response:
    """What a fetch returned. ``url`` is the final URL after redirects; ``headers`` keys are lower-case."""

    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    request: Request
    elapsed: float = 0.0
    redirects: tuple[str, ...] = ()
    screenshot: bytes | None = None
    encoding: str = field(default="utf-8")

    @property
    def text(self) -> str:
        return self.body.decode(self.encoding, errors="replace")

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


@runtime_checkable
class Fetcher(Protocol):
    """Fetches one request. An async context manager; ``close`` releases its pool / browser."""

    limits: FetchLimits

    async def __aenter__(self) -> Fetcher: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def fetch(self, request: Request) -> Response:
        """Fetch ``request`` within :attr:`limits`. Any status code is a Response (the caller decides
        what 429 or 404 mean); transport problems and broken limits raise a FetchError subclass."""
        ...

    async def close(self) -> None:
        """Release the connection pool or browser. Idempotent."""
        ...
