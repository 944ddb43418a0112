"""Proxies for the HTTP fetcher: which aiohttp session sends through a proxy, and the address guard
for proxied fetches.

- ``http://`` and ``https://`` proxies go through the fetcher's own connection pool (aiohttp's
  ``proxy=``, CONNECT for an https target; credentials in the proxy URL are sent as
  ``Proxy-Authorization``); ``socks5://`` (``socks5h://``, ``socks4://``) proxies each get a session of
  their own on an ``aiohttp_socks.ProxyConnector``, made on first use.
- The address guard: a proxy resolves the target's name itself, so crawlherd resolves and checks the
  target *before* the request goes to the proxy (there is a window: the proxy's own answer may differ;
  a name that resolves to a private address here is refused). The proxy's own address is checked too:
  a proxy on a private address needs the same permission (``allow_private_addresses`` or
  ``allowed_networks``) as a private target.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp_socks import ProxyConnectionError, ProxyError, ProxyTimeoutError

from crawlherd._redact import redact_url
from crawlherd.errors import AddressNotAllowedError
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.guard import Network, check_address

__all__ = ["PROXY_ERRORS", "ProxyRoutes"]

#: What a SOCKS proxy's connector raises (refused credentials, no route, no answer): not aiohttp's.
PROXY_ERRORS = (ProxyError, ProxyConnectionError, ProxyTimeoutError)

_CHECKED_FOR = 60.0  # seconds a proxy's address check holds


class ProxyRoutes:
    """The sessions and checks of one fetcher's proxied requests. ``close`` closes the SOCKS sessions."""

    def __init__(self, limits: FetchLimits, networks: tuple[Network, ...], headers: dict[str, str]) -> None:
        self._limits = limits
        self._networks = networks
        self._headers = headers
        self._socks: dict[str, aiohttp.ClientSession] = {}
        self._checked: dict[str, float] = {}

    @staticmethod
    def is_socks(proxy: str) -> bool:
        return proxy[:6].lower() == "socks5" or proxy[:6].lower() == "socks4"

    def session_for(self, proxy: str, default: aiohttp.ClientSession, request_class: Any) -> aiohttp.ClientSession:
        """The aiohttp session that sends through ``proxy`` (``default`` for an HTTP(S) proxy)."""
        if not self.is_socks(proxy):
            return default
        session = self._socks.get(proxy)
        if session is None or session.closed:
            from aiohttp_socks import ProxyConnector

            connector = ProxyConnector.from_url(proxy, rdns=True, limit=100)
            session = self._socks[proxy] = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                request_class=request_class,
            )
        return session

    async def check(self, url: str, proxy: str) -> None:
        """The address guard of a proxied hop: the target's addresses, and the proxy's (cached)."""
        if self._limits.allow_private_addresses:
            return
        expires = self._checked.get(proxy)
        now = time.monotonic()
        if expires is None or expires < now:
            p = urlsplit(proxy)
            port = p.port or (443 if p.scheme == "https" else 1080 if self.is_socks(proxy) else 80)
            try:
                await check_address(
                    p.hostname or "", port, url=redact_url(proxy), allow_private=False,
                    allowed_networks=self._networks,
                )
            except AddressNotAllowedError as exc:
                exc.args = (f"proxy {redact_url(proxy)}: {exc.args[0]}",)
                raise
            self._checked[proxy] = now + _CHECKED_FOR
        t = urlsplit(url)
        await check_address(
            t.hostname or "", t.port or (443 if t.scheme == "https" else 80), url=url, allow_private=False,
            allowed_networks=self._networks,
        )

    async def close(self) -> None:
        sessions, self._socks = list(self._socks.values()), {}
        for s in sessions:
            await s.close()
