"""aiohttp's and the OS's errors of one hop as crawlherd's :class:`~crawlherd.errors.FetchError`
subclasses, in the words an operator searches for (the HTTP fetcher's boundary, as httpx's
``map_httpcore_exceptions`` is its transports')."""

from __future__ import annotations

import errno

import aiohttp

from crawlherd.errors import AddressNotAllowedError, FetchError, FetchTimeoutError
from crawlherd.request import Request

__all__ = ["translate"]


def translate(exc: BaseException, url: str, request: Request, timeout: aiohttp.ClientTimeout) -> FetchError:
    """aiohttp's and the OS's errors of one hop as crawlherd's, in the words an operator searches for."""
    if isinstance(exc, TimeoutError):
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return FetchTimeoutError(f"{url}: connect timeout ({timeout.connect} s)", url=url, request=request)
        return FetchTimeoutError(f"{url}: total timeout ({timeout.total} s)", url=url, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        inner = exc.__cause__ or exc.os_error
        if isinstance(inner, AddressNotAllowedError):
            inner.url, inner.request = url, request
            return inner
        return FetchError(f"{url}: {_connect_reason(exc)}", url=url, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return FetchError(f"{url}: the server closed the connection without a response", url=url, request=request)
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientOSError, ConnectionError)):
        return FetchError(f"{url}: connection broken mid-response ({_reason(exc)})", url=url, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return FetchError(f"{url}: invalid URL ({exc})", url=url, request=request)
    if isinstance(exc, aiohttp.ClientError):
        return FetchError(f"{url}: {type(exc).__name__}: {exc}", url=url, request=request)
    return FetchError(f"{url}: {_reason(exc)}", url=url, request=request)


def _connect_reason(exc: aiohttp.ClientConnectorError) -> str:
    """What went wrong opening the connection, in the words an operator searches for."""
    where = f"{exc.host}:{exc.port}"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"DNS lookup failed for {exc.host} ({exc.strerror or exc.os_error})"
    if isinstance(exc.os_error, ConnectionRefusedError) or exc.os_error.errno == errno.ECONNREFUSED:
        return f"connection refused by {where}"
    return f"cannot connect to {where} ({exc.strerror or exc})"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionResetError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNRESET):
        return "connection reset by peer"
    return str(exc) or type(exc).__name__
