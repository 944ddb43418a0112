"""A request fetched under a session: what it carries, and the cookie arithmetic every fetcher shares.

A request fetched under a session carries ``Request.meta["crawlherd.session"]`` (JSON-safe)::

    {"id": "3f2a...", "proxy": "socks5://user:pw@10.0.0.7:1080" | None,
     "headers": {"User-Agent": "..."},
     "cookies": [{"name": "sid", "value": "...", "domain": "jobs.example.com", "path": "/"}]}

A fetcher sends the request through that proxy with those headers and cookies, and reports the cookies
the site set (every hop of its redirects included) in ``Response.cookies`` / ``CrawlResult.cookies``,
as a list of the same dicts. Who made the session keeps the returned cookies in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from http.cookies import CookieError, SimpleCookie
from typing import Any, TypedDict
from urllib.parse import urlsplit

__all__ = [
    "SESSION_META",
    "Cookie",
    "SessionMeta",
    "cookie_header",
    "merge_cookies",
    "parse_set_cookie",
    "session_of",
]

#: The ``Request.meta`` key of a request's session.
SESSION_META = "crawlherd.session"


class Cookie(TypedDict):
    """One cookie, as sessions keep it."""

    name: str
    value: str
    domain: str
    path: str


class SessionMeta(TypedDict):
    """What a request fetched under a session carries (see the module's docstring)."""

    id: str
    proxy: str | None
    headers: dict[str, str]
    cookies: list[Cookie]


def session_of(meta: Mapping[str, Any] | None) -> SessionMeta | None:
    """The session a request's meta carries, or None."""
    if not meta:
        return None
    value = meta.get(SESSION_META)
    return value if isinstance(value, dict) else None  # type: ignore[return-value]


def _domain_matches(host: str, domain: str) -> bool:
    domain = domain.lstrip(".").lower()
    return host == domain or host.endswith("." + domain)


def cookie_header(cookies: Sequence[Mapping[str, str]], url: str) -> str | None:
    """The ``Cookie`` header for ``url`` from ``cookies`` (domain and path matched), None when none."""
    if not cookies:
        return None
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    path = parts.path or "/"
    pairs = [
        f"{c['name']}={c['value']}"
        for c in cookies
        if _domain_matches(host, c.get("domain") or host) and path.startswith(c.get("path") or "/")
    ]
    return "; ".join(pairs) or None


def parse_set_cookie(values: Iterable[str], url: str) -> list[Cookie]:
    """The cookies of ``Set-Cookie`` header values answered for ``url`` (a cookie whose ``Max-Age`` is 0
    or negative comes back with an empty value: it is deleted)."""
    host = (urlsplit(url).hostname or "").lower()
    out: list[Cookie] = []
    for value in values:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(value)
        except CookieError:
            continue
        for name, morsel in jar.items():
            deleted = morsel["max-age"].strip().startswith(("0", "-")) if morsel["max-age"] else False
            out.append(
                Cookie(
                    name=name,
                    value="" if deleted else morsel.value,
                    domain=(morsel["domain"] or host).lstrip(".").lower(),
                    path=morsel["path"] or "/",
                )
            )
    return out


def merge_cookies(old: Iterable[Cookie], new: Iterable[Cookie]) -> list[Cookie]:
    """``old`` with ``new`` over it (same name, domain and path: replaced; an empty value: deleted)."""
    kept: dict[tuple[str, str, str], Cookie] = {(c["name"], c["domain"], c["path"]): c for c in old}
    for c in new:
        key = (c["name"], c["domain"], c["path"])
        if c["value"]:
            kept[key] = c
        else:
            kept.pop(key, None)
    return list(kept.values())
