"""A run's identity for the engine: a User-Agent, cookies, one proxy or a rotation of proxies -- crawl4ai's
names (``ProxyConfig``, ``RoundRobinProxyStrategy``, ``CrawlerRunConfig(proxy_config=...,
proxy_rotation_strategy=..., user_agent=..., cookies=...)``) on crawlherd's session meta.

When a :class:`~crawlherd.crawler.config.CrawlerRunConfig` sets any of them, every request of the run
is fetched under one run session (``meta["crawlherd.session"]``, :mod:`crawlherd.fetch.session`): its
proxy (the run's, or the rotation's next one for each request), the User-Agent, and the run's cookies
-- the ones given, and those the sites set during the run. Politeness stays per host: proxies never
multiply the rate a site sees. (The fleet's sessions, bans and proxy tiers are a website's fetch
profile: :mod:`crawlherd.fetchprofile`.)
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable
from urllib.parse import quote, unquote, urlsplit

from crawlherd._redact import redact_url
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.session import SESSION_META, Cookie, SessionMeta, merge_cookies
from crawlherd.request import Request

__all__ = ["ProxyConfig", "ProxyRotationStrategy", "RoundRobinProxyStrategy", "RunSession", "proxy_url"]

_SCHEMES = ("http://", "https://", "socks5://", "socks5h://", "socks4://")


@dataclass(frozen=True)
class ProxyConfig:
    """One proxy, as crawl4ai writes it: ``ProxyConfig(server="http://host:port", username=None,
    password=None, ip=None)``; :meth:`from_string` reads ``"ip:port"``, ``"ip:port:user:pass"`` or a
    URL (credentials in it are taken apart into ``username`` / ``password``, as crawl4ai does), and
    ``ip`` defaults to the server's host. Its repr hides the password. ``ProxyConfig.DIRECT``
    (``"direct"``) given as a proxy means none."""

    DIRECT: ClassVar[str] = "direct"

    server: str
    username: str | None = None
    password: str | None = None
    ip: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.server, str) or not self.server:
            raise ConfigurationError(f"ProxyConfig(server={self.server!r}): give the proxy's URL or host:port")
        if not self.server.lower().startswith(_SCHEMES):
            if "://" in self.server:
                raise ConfigurationError(
                    f"ProxyConfig(server={redact_url(self.server)!r}): use one of {', '.join(_SCHEMES)}"
                )
            object.__setattr__(self, "server", f"http://{self.server}")
        try:
            parts = urlsplit(self.server)
            parts.port  # noqa: B018 - a bad port raises here
        except ValueError as exc:
            raise ConfigurationError(f"ProxyConfig(server={redact_url(self.server)!r}): {exc}") from None
        if not parts.hostname:
            raise ConfigurationError(f"ProxyConfig(server={redact_url(self.server)!r}): no host")
        if "@" in parts.netloc:  # credentials in the URL: kept apart, as crawl4ai's from_string does
            if self.username is None and parts.username:
                object.__setattr__(self, "username", unquote(parts.username))
                object.__setattr__(self, "password", unquote(parts.password) if parts.password else None)
            object.__setattr__(self, "server", parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl())
        if self.ip is None:
            object.__setattr__(self, "ip", parts.hostname)

    def __repr__(self) -> str:
        hidden = "***" if self.password else None
        return f"ProxyConfig(server={redact_url(self.server)!r}, username={self.username!r}, password={hidden!r})"

    @classmethod
    def from_string(cls, text: str) -> ProxyConfig:
        """``"ip:port"``, ``"ip:port:user:pass"`` (crawl4ai's form) or a proxy URL."""
        text = text.strip()
        if "://" in text:
            return cls(text)
        parts = text.split(":")
        if len(parts) == 2:
            return cls(f"http://{text}", ip=parts[0])
        if len(parts) == 4:
            return cls(f"http://{parts[0]}:{parts[1]}", parts[2], parts[3], ip=parts[0])
        raise ConfigurationError(f"proxy {redact_url(text)!r}: write ip:port, ip:port:user:pass or a URL")

    @classmethod
    def from_strings(cls, texts: Iterable[str]) -> list[ProxyConfig]:
        return [cls.from_string(t) for t in texts]

    @classmethod
    def from_dict(cls, proxy: Mapping[str, Any]) -> ProxyConfig:
        """crawl4ai's dict: ``{"server", "username", "password", "ip"}`` (only ``server`` needed)."""
        unknown = set(proxy) - {"server", "username", "password", "ip"}
        if unknown or "server" not in proxy:
            raise ConfigurationError(
                f"proxy dict with keys {sorted(proxy)}: needs 'server' and may have 'username', 'password', 'ip'"
            )
        return cls(**{k: proxy[k] for k in ("server", "username", "password", "ip") if k in proxy})

    @classmethod
    def from_env(cls, env_var: str = "PROXIES") -> list[ProxyConfig]:
        """crawl4ai's: the proxies of a comma-separated environment variable (empty: none)."""
        return [cls.from_string(t) for t in os.environ.get(env_var, "").split(",") if t.strip()]

    def to_dict(self) -> dict[str, str | None]:
        """crawl4ai's dict form (the password in it: do not log it)."""
        return {"server": self.server, "username": self.username, "password": self.password, "ip": self.ip}

    def clone(self, **changes: Any) -> ProxyConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @property
    def url(self) -> str:
        """The proxy as a URL, credentials included (never log it: :func:`redact_url`)."""
        if not self.username:
            return self.server
        p = urlsplit(self.server)
        auth = quote(self.username, safe="") + (f":{quote(self.password, safe='')}" if self.password else "")
        return p._replace(netloc=f"{auth}@{p.netloc}").geturl()


def proxy_url(proxy: ProxyConfig | str | Mapping[str, Any]) -> str | None:
    """A proxy given as a :class:`ProxyConfig`, a string or crawl4ai's dict, as a URL; None for
    ``ProxyConfig.DIRECT`` (``"direct"``: no proxy)."""
    if isinstance(proxy, ProxyConfig):
        return proxy.url
    if isinstance(proxy, str):
        return None if proxy.strip().lower() == ProxyConfig.DIRECT else ProxyConfig.from_string(proxy).url
    if isinstance(proxy, Mapping):
        return ProxyConfig.from_dict(proxy).url
    if isinstance(proxy, list | tuple):
        raise ConfigurationError(
            "proxy_config=[...]: a list of proxies to try in turn is not supported; rotate them with "
            "proxy_rotation_strategy=RoundRobinProxyStrategy([...]), or give a website's fetch profile "
            "proxy tiers (docs/fetch-profile.md)"
        )
    raise ConfigurationError(f"proxy_config={type(proxy).__name__}: give a ProxyConfig, a URL or a dict with 'server'")


@runtime_checkable
class ProxyRotationStrategy(Protocol):
    """crawl4ai's rotation protocol: the proxy for the next request."""

    async def get_next_proxy(self) -> ProxyConfig | None: ...


class RoundRobinProxyStrategy:
    """crawl4ai's ``RoundRobinProxyStrategy(proxies)``: each request through the next proxy in turn."""

    def __init__(self, proxies: Sequence[ProxyConfig | str] | None = None) -> None:
        self._proxies: list[ProxyConfig] = []
        self._cycle: Any = None
        self.add_proxies(list(proxies or []))

    def add_proxies(self, proxies: Sequence[ProxyConfig | str]) -> None:
        self._proxies.extend(p if isinstance(p, ProxyConfig) else ProxyConfig.from_string(p) for p in proxies)
        self._cycle = itertools.cycle(self._proxies) if self._proxies else None

    async def get_next_proxy(self) -> ProxyConfig | None:
        return next(self._cycle) if self._cycle is not None else None


_SESSIONS: dict[int, tuple[Any, RunSession]] = {}  # by config object (kept, so its id stays its own)
_SESSIONS_KEPT = 64


class RunSession:
    """The session every request of one run is fetched under (see the module's docstring). None from
    :meth:`of` when the config asks for nothing of the kind."""

    def __init__(self, config: Any) -> None:
        self._proxy = proxy_url(config.proxy_config) if config.proxy_config is not None else None
        self._rotation: ProxyRotationStrategy | None = config.proxy_rotation_strategy
        if self._rotation is not None and not isinstance(self._rotation, ProxyRotationStrategy):
            raise ConfigurationError(
                "proxy_rotation_strategy: needs an async get_next_proxy() (RoundRobinProxyStrategy)"
            )
        # the run's headers go with its session too: the browser sends a session's headers, not a request's
        self._headers = {**dict(getattr(config, "headers", None) or {}),
                         **({"User-Agent": config.user_agent} if config.user_agent else {})}
        self._given = config.cookies
        self._jar: list[Cookie] = []

    @classmethod
    def of(cls, config: Any) -> RunSession | None:
        """The session of runs made with ``config`` (the same config object, the same session: its
        cookies last from one ``arun`` to the next, as in a crawl4ai browser context)."""
        wanted = (config.proxy_config, config.proxy_rotation_strategy, config.user_agent, config.cookies)
        if all(v is None for v in wanted):
            return None
        kept = _SESSIONS.get(id(config))
        if kept is not None and kept[0] is config:
            return kept[1]
        if len(_SESSIONS) >= _SESSIONS_KEPT:
            _SESSIONS.pop(next(iter(_SESSIONS)))
        session = cls(config)
        _SESSIONS[id(config)] = (config, session)
        return session

    def _cookies(self, request: Request) -> list[Cookie]:
        given = self._given
        if not given and not self._jar:
            return []
        host = request.host.rsplit(":", 1)[0] if not request.host.startswith("[") else request.host
        if isinstance(given, Mapping):
            base = [Cookie(name=str(k), value=str(v), domain=host, path="/") for k, v in given.items()]
        else:
            base = [Cookie(name=str(c["name"]), value=str(c["value"]), domain=str(c.get("domain") or host),
                           path=str(c.get("path") or "/")) for c in (given or [])]
        return merge_cookies(base, self._jar)

    async def attach(self, request: Request) -> Request:
        """``request`` to fetch under the run's session."""
        proxy = self._proxy
        if self._rotation is not None:
            nxt = await self._rotation.get_next_proxy()
            proxy = nxt.url if nxt is not None else proxy
        meta = SessionMeta(id="run", proxy=proxy, headers=self._headers, cookies=self._cookies(request))
        return request.with_meta({**(request._meta or {}), SESSION_META: meta})  # noqa: SLF001

    def keep(self, cookies: Iterable[Mapping[str, str]]) -> None:
        """Keep the cookies a site set (sent on the run's next requests to it)."""
        got = [Cookie(name=c["name"], value=c["value"], domain=c["domain"], path=c["path"]) for c in cookies]
        if got:
            self._jar = merge_cookies(self._jar, got)
