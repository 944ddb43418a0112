"""URL canonicalisation: the form of a URL that the duplicate filter compares.

Rules (each one tested, see ``tests/unit/test_url.py``):

- scheme and host are lower-cased; only ``http`` and ``https`` are crawled;
- international host names are IDNA-encoded; IPv6 literals keep their brackets;
- the default port (80 for http, 443 for https) is dropped, any other port is kept;
- the path keeps its case (``/Jobs`` and ``/jobs`` are two pages); an empty path becomes ``/``;
  characters that may not stand in a URL are percent-encoded, existing escapes are kept;
- query parameters are sorted (pairs kept whole, blank values kept);
- the fragment is dropped;
- tracking parameters (``utm_*``, ``gclid``, ...) are dropped only when asked for.

Bad input raises :class:`~crawlherd.errors.InvalidURLError` naming the problem.
Canonicalisation is idempotent: ``canonicalize_url(canonicalize_url(u)) == canonicalize_url(u)``.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit

from crawlherd.errors import InvalidURLError

__all__ = ["DEFAULT_TRACKING_PARAMS", "canonicalize", "canonicalize_url", "host_of", "split_origin"]

DEFAULT_PORTS = {"http": 80, "https": 443}
DEFAULT_TRACKING_PARAMS = frozenset(
    {"gclid", "fbclid", "msclkid", "mc_cid", "mc_eid", "_ga", "yclid", "igshid", "ref_src"}
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A DNS name (labels of letters, digits, hyphens and underscores) or an IPv4 address.
_HOST = re.compile(
    r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$"
)
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = "/?%:@!$&'()*+,;=-._~"
_NEEDS_QUOTE = re.compile(r"[^A-Za-z0-9/%:@!$&'()*+,;=\-._~?]")


def _quote(text: str, safe: str) -> str:
    # Fast path: nearly every real path and query is already safe.
    if _NEEDS_QUOTE.search(text) is None:
        return text
    return quote(text, safe=safe)


def _canonical_host(url: str, hostname: str | None, netloc: str) -> str:
    if not hostname:
        raise InvalidURLError(f"URL has no host: {url!r}", url=url)
    if "[" in netloc:  # IPv6 literal: urlsplit already validated the brackets
        return f"[{hostname}]"
    if not hostname.isascii():
        try:
            hostname = hostname.encode("idna").decode("ascii")
        except UnicodeError:
            raise InvalidURLError(f"URL host {hostname!r} is not a valid host name: {url!r}", url=url) from None
    if _HOST.match(hostname) is None:
        raise InvalidURLError(f"URL host {hostname!r} is not a valid host name: {url!r}", url=url)
    return hostname.rstrip(".")


# Ordinary http(s) URLs: scheme, a plain host name or IPv4 address, an optional port. Anything else
# (userinfo, IPv6, IDNA, odd characters) takes the general path through urlsplit.
_FAST = re.compile(
    r"(https?)://([a-z0-9_.-]+)(?::([0-9]{1,5}))?(/[^?#\x00-\x20\x7f]*)?(?:\?([^#\x00-\x20\x7f]*))?(?:#[^\x00-\x1f\x7f]*)?\Z",
    re.I,
)


def canonicalize_url(url: str, *, strip_tracking: bool | frozenset[str] = False) -> str:
    """Return the canonical form of ``url`` or raise :class:`InvalidURLError`.

    ``strip_tracking`` drops ``utm_*`` and :data:`DEFAULT_TRACKING_PARAMS` when True, or the given
    parameter names (``utm_*`` included) when a set.
    """
    return canonicalize(url, strip_tracking=strip_tracking)[0]


def canonicalize(url: str, *, strip_tracking: bool | frozenset[str] = False) -> tuple[str, str]:
    """``(canonical URL, host key)`` -- the host key is the politeness key, see :func:`host_of`."""
    if isinstance(url, str):
        m = _FAST.match(url)
        if m is not None:
            scheme, host, port, path, query = m.groups()
            scheme = scheme.lower()
            host = host.lower()
            if _HOST.match(host) is not None and (port is None or 0 < int(port) <= 65535):
                host = host.rstrip(".")
                if port is not None and int(port) != DEFAULT_PORTS[scheme]:
                    host = f"{host}:{int(port)}"
                return _assemble(scheme, host, path or "/", query, strip_tracking), host
    return _canonicalize_general(url, strip_tracking)


def _assemble(scheme: str, host: str, path: str, query: str | None, strip_tracking: bool | frozenset[str]) -> str:
    path = _quote(path, _PATH_SAFE)
    if query:
        pairs = [p for p in query.split("&") if p]
        if strip_tracking:
            names = DEFAULT_TRACKING_PARAMS if strip_tracking is True else strip_tracking
            pairs = [p for p in pairs if not _is_tracking(p.partition("=")[0], names)]
        # Quote before sorting, so that the order is the same when the canonical form is read again.
        query = "&".join(sorted([_quote(p, _QUERY_SAFE) for p in pairs]))
        if query:
            return f"{scheme}://{host}{path}?{query}"
    return f"{scheme}://{host}{path}"


def _canonicalize_general(url: str, strip_tracking: bool | frozenset[str]) -> tuple[str, str]:
    if not isinstance(url, str):
        raise InvalidURLError(f"URL must be a string, not {type(url).__name__}", url=repr(url))
    url = url.strip(" ")
    if _CONTROL.search(url):
        raise InvalidURLError(f"URL contains control characters: {url!r}", url=url)
    if not url:
        raise InvalidURLError("URL is empty", url=url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # bad port, bad IPv6 literal
        raise InvalidURLError(f"URL {url!r} is malformed: {exc}", url=url) from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise InvalidURLError(f"URL has no scheme (expected http:// or https://): {url!r}", url=url)
    if scheme not in DEFAULT_PORTS:
        raise InvalidURLError(f"URL scheme {scheme!r} is not supported (use http or https): {url!r}", url=url)
    netloc = parts.netloc
    host = _canonical_host(url, parts.hostname, netloc)
    if port == 0:
        raise InvalidURLError(f"URL port 0 is not a usable port: {url!r}", url=url)
    if port is not None and port != DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    userinfo = netloc.rpartition("@")[0] + "@" if "@" in netloc else ""
    return _assemble(scheme, userinfo + host, parts.path or "/", parts.query, strip_tracking), host


def _is_tracking(name: str, names: frozenset[str]) -> bool:
    return name.startswith("utm_") or name in names


def host_of(canonical_url: str) -> str:
    """The politeness key of a canonical URL: its host, with the port when it is not the default."""
    rest = canonical_url[canonical_url.index("//") + 2 :]
    end = len(rest)
    for sep in "/?":
        i = rest.find(sep)
        if i != -1 and i < end:
            end = i
    netloc = rest[:end]
    return netloc.rpartition("@")[2]


# An http(s) URL's scheme and an ASCII netloc without brackets, up to where urlsplit() ends the netloc.
_ORIGIN = re.compile(r"(https?)://([A-Za-z0-9._~%!$&'()*+,;=:@-]*)(?=[/?#]|\Z)")


def split_origin(url: str) -> tuple[str, str]:
    """``(scheme, netloc)`` exactly as ``urlsplit(url)`` has them (its ValueError included), without
    splitting the rest of an ordinary http(s) URL: robots.txt and the link filter ask it of every page."""
    if url.isprintable():  # no tab or line break for urlsplit() to drop, no control character to strip
        m = _ORIGIN.match(url)
        if m is not None:
            return m.group(1), m.group(2)
    parts = urlsplit(url)
    return parts.scheme, parts.netloc
