"""The browser contexts of a :class:`~crawlherd.fetch.browser.BrowserFetcher`: one for requests without
a session, and one per session (:class:`BrowserSession`), each with its own pages, cookies, headers and
proxy.

A request fetched under a session carries ``Request.meta["crawlherd.session"]`` -- the same session
the HTTP fetcher uses::

    {"id": "s-1", "proxy": "http://user:secret@proxy:3128" | None,
     "headers": {"User-Agent": "...", "Accept-Language": "de"},
     "cookies": [{"name": "sid", "value": "...", "domain": "jobs.example.com", "path": "/"}]}

Its context is opened with that proxy (Playwright's ``proxy={server, username, password}``), the
headers (a ``User-Agent`` among them becomes the context's user agent) and the cookies, and kept for
the session's next pages (at most ``max_contexts`` session contexts; the least recently used idle one
is closed first). Before each fetch the session's cookies and headers are applied again, so a login
made over HTTP serves the browser; after it, the cookies the site set (new ones, or new values) are
reported in ``Response.cookies`` in the same form (the domain lower-case, without a leading dot, as
the HTTP fetcher reports them), so the session learns them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from crawlherd._redact import redact_url
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.chromium import BROWSER_PROXY_SCHEMES
from crawlherd.request import Request

__all__ = ["SESSION_META", "BrowserSession", "ContextPool", "Cookie", "SessionContext"]

#: The ``Request.meta`` key of the session a request is fetched under.
SESSION_META = "crawlherd.session"
#: A cookie as sessions carry it: ``name``, ``value``, ``domain``, ``path``.
Cookie = dict[str, str]


def _cookie(c: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(name, value, domain, path) as given (a leading dot: the subdomains too)."""
    return str(c.get("name", "")), str(c.get("value", "")), str(c.get("domain", "")), str(c.get("path") or "/")


def _same(c: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
    """What tells two cookies apart for "did the site set it": the domain without its leading dot."""
    return c[0], c[1], c[2].lstrip("."), c[3]


def proxy_settings(url: str) -> dict[str, str]:
    """Playwright's ``proxy`` option for a proxy URL: ``server`` (scheme, host, port) and the
    credentials apart."""
    parts = urlsplit(url)
    server = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    settings = {"server": server}
    if parts.username:
        settings["username"] = unquote(parts.username)
        settings["password"] = unquote(parts.password or "")
    return settings


@dataclass(frozen=True)
class BrowserSession:
    """A session a request is fetched under (see the module): ``id``, ``proxy`` URL (credentials
    in it), ``headers``, ``cookies``."""

    id: str
    proxy: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    cookies: tuple[tuple[str, str, str, str], ...] = ()

    @classmethod
    def of(cls, request: Request) -> BrowserSession | None:
        """The session ``request`` carries, or None; a malformed one is a ConfigurationError."""
        raw = request.meta.get(SESSION_META) if request.meta else None
        if raw is None:
            return None
        if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str) or not raw["id"]:
            raise ConfigurationError(f"meta[{SESSION_META!r}] needs an 'id' (a non-empty string)")
        proxy = raw.get("proxy")
        if proxy is not None and (not isinstance(proxy, str) or urlsplit(proxy).scheme not in BROWSER_PROXY_SCHEMES):
            raise ConfigurationError(
                f"session {raw['id']!r}: proxy {redact_url(str(proxy))!r} must be an http://, https:// or socks5:// URL"
            )
        headers = raw.get("headers") or {}
        cookies = raw.get("cookies") or []
        if not isinstance(headers, Mapping) or not isinstance(cookies, list | tuple):
            raise ConfigurationError(f"session {raw['id']!r}: headers must be a mapping and cookies a list")
        return cls(
            id=raw["id"],
            proxy=proxy,
            headers=tuple(sorted((str(k), str(v)) for k, v in headers.items())),
            cookies=tuple(_cookie(c) for c in cookies if isinstance(c, Mapping) and c.get("name")),
        )

    @property
    def user_agent(self) -> str | None:
        return next((v for k, v in self.headers if k.lower() == "user-agent"), None)

    def extra_headers(self) -> dict[str, str]:
        """The headers besides the User-Agent (which is the context's own setting)."""
        return {k: v for k, v in self.headers if k.lower() != "user-agent"}

    def proxy_settings(self) -> dict[str, str] | None:
        """Playwright's ``proxy`` option: ``server`` (scheme, host, port) and the credentials apart."""
        return None if self.proxy is None else proxy_settings(self.proxy)

    def playwright_cookies(self, url: str) -> list[dict[str, str]]:
        """The cookies in Playwright's form (a cookie without a domain is bound to ``url``)."""
        out = []
        for name, value, domain, path in self.cookies:
            if domain:
                out.append({"name": name, "value": value, "domain": domain, "path": path or "/"})
            else:
                out.append({"name": name, "value": value, "url": url})
        return out


@dataclass
class SessionContext:
    """One browser context, its idle pages, and (for a session) what was last applied to it."""

    context: Any
    session: BrowserSession | None = None
    idle_pages: list[Any] = field(default_factory=list)
    in_use: int = 0
    applied: tuple[Any, ...] = ()
    #: The headers every page of the browser sends (BrowserOptions.headers); a session's over them.
    base_headers: Mapping[str, str] = field(default_factory=dict)
    #: The cookies every context starts with (BrowserOptions.cookies): not reported as set by the site.
    base_cookies: frozenset[tuple[str, str, str, str]] = frozenset()

    async def apply(self, session: BrowserSession, url: str) -> None:
        """Bring the context's cookies and headers up to the session's (when they changed)."""
        state = (session.headers, session.cookies)
        if state == self.applied:
            return
        if session.cookies:
            await self.context.add_cookies(session.playwright_cookies(url))
        await self.context.set_extra_http_headers({**self.base_headers, **session.extra_headers()})
        self.applied = state
        self.session = session

    async def new_cookies(self) -> list[Cookie]:
        """The context's cookies that the session did not carry (new ones, or new values)."""
        given = {_same(c) for c in self.session.cookies} if self.session is not None else set()
        given |= self.base_cookies
        out: list[Cookie] = []
        for c in await self.context.cookies():
            name, value, domain, path = same = _same(_cookie(c))
            if same not in given:  # reported as the HTTP side keeps cookies: the domain without its dot
                out.append({"name": name, "value": value, "domain": domain.lower(), "path": path})
        return out

    async def close(self) -> None:
        self.idle_pages.clear()
        with contextlib.suppress(Exception):
            await self.context.close()


class ContextPool:
    """The default context and one per session, by (session id, proxy); ``open_context(session)``
    makes one. At most ``max_contexts`` session contexts: past it, the least recently used idle one
    is closed."""

    def __init__(self, open_context: Callable[[BrowserSession | None], Awaitable[Any]], *, max_contexts: int = 16,
                 base_headers: Mapping[str, str] | None = None, base_cookies: Iterable[Mapping[str, str]] = ()):
        self._open = open_context
        self._max = max_contexts
        self._base_headers = dict(base_headers or {})
        self._base_cookies = frozenset(_same(_cookie(c)) for c in base_cookies if c.get("domain"))
        self.default: SessionContext | None = None
        self._opening = asyncio.Lock()
        self._sessions: OrderedDict[tuple[str, str | None], SessionContext] = OrderedDict()

    async def start(self) -> None:
        self.default = SessionContext(await self._open(None))

    def __len__(self) -> int:
        return len(self._sessions)

    async def get(self, session: BrowserSession | None) -> SessionContext:
        """The context of ``session`` (the default one for None), opened if need be; counted in use
        until :meth:`release`."""
        if session is None:
            assert self.default is not None
            entry = self.default
        else:
            key = (session.id, session.proxy)
            async with self._opening:  # two pages of a new session open one context
                found = self._sessions.get(key)
                if found is None:
                    await self._evict()
                    found = self._sessions[key] = SessionContext(await self._open(session),
                                                                 base_headers=self._base_headers,
                                                                 base_cookies=self._base_cookies)
                self._sessions.move_to_end(key)
            entry = found
        entry.in_use += 1
        return entry

    def release(self, entry: SessionContext) -> None:
        entry.in_use -= 1

    async def _evict(self) -> None:
        while len(self._sessions) >= self._max:
            idle = next((k for k, e in self._sessions.items() if e.in_use == 0), None)
            if idle is None:
                return  # every one is busy: one more, for now
            await self._sessions.pop(idle).close()

    async def close(self) -> None:
        entries = [*self._sessions.values(), *([self.default] if self.default is not None else [])]
        self._sessions.clear()
        self.default = None
        for entry in entries:
            await entry.close()
