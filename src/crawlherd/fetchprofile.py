"""A website's fetch profile: how its pages are asked for -- headers, cookies, proxies, sessions, ban
detection and an optional login step. One typed object (:class:`FetchProfile`), ``SiteSpec.fetch``,
validated once where the website is declared and carried in the job message with the rest of the spec.

A targets-file entry (TOML)::

    [websites.fetch]
    user_agent = "Mozilla/5.0 (X11; Linux x86_64) ..."
    headers = { Accept-Language = "en" }
    cookies = { consent = "yes" }
    proxies = [["http://user:pw@p1:3128", "socks5://p2:1080"], ["http://p3:3128"]]   # tiers (or one list)

    [websites.fetch.ban]           # what a blocked page looks like
    statuses = [403, 429, 503]     # 429 only without Retry-After (with one it is politeness)
    markers = ["(?i)captcha"]      # a 200 page whose body matches is blocked
    block_urls = ["/blocked"]      # a redirect to a URL matching one is blocked
    cool_off = "60s"               # a proxy that was blocked rests this long for the site

    [websites.fetch.login]         # optional
    url = "https://jobs.example.com/login"
    form = { remember = "1" }      # plain fields
    secrets = { user = "env:BOARD_USER", password = "file:board_password" }

Secrets are named, never written: ``env:NAME`` (an environment variable of the worker) or
``file:NAME`` (a file in the directory ``CRAWLHERD_SECRETS_DIR``, ``/run/secrets`` by default). They
are read by the worker that logs in, at the moment it does, and go nowhere else. A proxy's password, a
header's or a cookie's value can name a secret the same way, in braces --
``"http://alice:{env:PROXY_PW}@proxy:3128"``, ``{ X-Api-Key = "{file:board_key}" }`` -- read when a
request is sent (:func:`with_secrets`): the config DB, the job message and the sessions store hold the
name only. (A password written out in a proxy URL works too; it is then stored with the website, and
redacted wherever it is shown.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crawlherd._redact import redact_url
from crawlherd.duration import duration_seconds
from crawlherd.errors import ConfigurationError

__all__ = [
    "DIRECT",
    "BanSpec",
    "FetchProfile",
    "LoginSpec",
    "SessionSpec",
    "proxy_label",
    "read_secret",
    "with_secrets",
]

#: The identity of a site fetched without a proxy (a proxy key in the sessions store).
DIRECT = "direct"
_PROXY_SCHEMES = ("http", "https", "socks5", "socks5h", "socks4")
_SECRET_REF = re.compile(r"^(env|file):([A-Za-z0-9_.-]{1,200})$")
_SECRET_IN_TEXT = re.compile(r"\{((?:env|file):[A-Za-z0-9_.-]{1,200})\}")


def _regexes(values: list[str]) -> list[str]:
    for v in values:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"{v!r} is not a regular expression ({exc})") from None
    return values


def proxy_label(proxy: str | None) -> str:
    """A proxy as it may be shown: credentials redacted; :data:`DIRECT` for no proxy."""
    return DIRECT if not proxy else redact_url(proxy)


class BanSpec(BaseModel):
    """What a blocked page looks like, and what a block costs the proxy that met it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    statuses: tuple[int, ...] = (403, 429, 503)
    markers: list[str] = Field(default_factory=list, description="regexes; a 200 page matching one is blocked")
    block_urls: list[str] = Field(default_factory=list, description="regexes of the final URL of a block page")
    cool_off: float = Field(default=60.0, gt=0, description="seconds a blocked proxy rests for the site")
    escalate_after: int = Field(default=3, ge=1, description="blocks in a row that move the site up a tier")
    descend_after: int = Field(default=50, ge=1, description="successes in a row that move it back down")
    page_attempts: int = Field(default=0, ge=0, description="blocks a page may meet (0: two per identity)")

    _cool = field_validator("cool_off", mode="before")(classmethod(lambda cls, v: duration_seconds(v)))
    _re = field_validator("markers", "block_urls")(classmethod(lambda cls, v: _regexes(v)))

    def blocked(self, status: int | None, headers: Any, final_url: str, text: str | None) -> str | None:
        """Why a page is a block page (None: it is not). ``text`` None: the body is not looked at."""
        if status is not None and status in self.statuses:
            if status == 429 and headers is not None and headers.get("retry-after"):
                return None  # a Retry-After is the site's politeness, not a ban
            return f"HTTP {status}"
        for pattern in self.block_urls:
            if re.search(pattern, final_url):
                return f"redirected to a block page ({redact_url(final_url)})"
        if text is not None:
            for pattern in self.markers:
                if re.search(pattern, text):
                    return f"block page (matches {pattern!r})"
        return None


class SessionSpec(BaseModel):
    """A session (cookies + headers + one proxy) lives at most ``max_age`` seconds and ``max_uses``
    pages; ``max_errors`` failed fetches retire it too. A block retires it at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_age: float = Field(default=3600.0, gt=0)
    max_uses: int = Field(default=200, ge=1)
    max_errors: int = Field(default=3, ge=1)
    per_proxy: int = Field(default=1, ge=1, le=100, description="live sessions kept per proxy")

    _age = field_validator("max_age", mode="before")(classmethod(lambda cls, v: duration_seconds(v)))


class LoginSpec(BaseModel):
    """A login step: a POST of ``form`` (url-encoded, or ``json`` when ``encoding = "json"``) plus the
    named ``secrets`` to ``url``; it worked when the answer's status is below 400, its final URL is not
    the login URL, and (when set) its body matches ``success_marker``. A page shows the login has lapsed
    when it redirects to ``url``, answers one of ``lapse_statuses``, or matches ``lapse_marker``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    encoding: Literal["form", "json"] = "form"
    form: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict, description="field -> env:NAME | file:NAME")
    success_marker: str | None = None
    lapse_marker: str | None = None
    lapse_statuses: tuple[int, ...] = (401,)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.lower().startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @field_validator("secrets")
    @classmethod
    def _refs(cls, value: dict[str, str]) -> dict[str, str]:
        for name, ref in value.items():
            if not _SECRET_REF.match(ref):
                raise ValueError(
                    f"secret {name!r} must be named, not written: 'env:NAME' or 'file:NAME' (got another value)"
                )
        return value

    @field_validator("success_marker", "lapse_marker")
    @classmethod
    def _marker(cls, value: str | None) -> str | None:
        if value is not None:
            _regexes([value])
        return value

    def lapsed(self, status: int | None, final_url: str, redirects: tuple[str, ...], text: str | None) -> bool:
        """Whether a page shows the login has lapsed."""
        if status is not None and status in self.lapse_statuses:
            return True
        if redirects and _same_page(final_url, self.url):
            return True
        return bool(self.lapse_marker and text is not None and re.search(self.lapse_marker, text))

    def succeeded(self, status: int | None, final_url: str, text: str) -> bool:
        """Whether the login's answer says it worked."""
        if status is None or status >= 400 or _same_page(final_url, self.url):
            return False
        return not self.success_marker or re.search(self.success_marker, text) is not None

    def payload(self) -> dict[str, str]:
        """The fields to post: ``form`` and the secrets, read now (ConfigurationError names a missing
        one, never its value)."""
        return {**self.form, **{name: read_secret(ref) for name, ref in self.secrets.items()}}


def _same_page(a: str, b: str) -> bool:
    sa, sb = urlsplit(a), urlsplit(b)
    return (sa.netloc.lower(), sa.path.rstrip("/")) == (sb.netloc.lower(), sb.path.rstrip("/"))


def read_secret(ref: str) -> str:
    """The value of a secret named ``env:NAME`` or ``file:NAME`` (see the module's docstring)."""
    m = _SECRET_REF.match(ref)
    if m is None:
        raise ConfigurationError(f"secret reference {ref!r}: write env:NAME or file:NAME")
    kind, name = m.group(1), m.group(2)
    if kind == "env":
        value = os.environ.get(name)
        if value is None:
            raise ConfigurationError(f"secret {ref}: the environment variable {name} is not set on this worker")
        return value
    path = Path(os.environ.get("CRAWLHERD_SECRETS_DIR", "/run/secrets")) / name
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigurationError(f"secret {ref}: cannot read {path} ({exc.strerror})") from None


def with_secrets(text: str) -> str:
    """``text`` with each ``{env:NAME}`` / ``{file:NAME}`` replaced by that secret's value."""
    if "{" not in text:
        return text
    return _SECRET_IN_TEXT.sub(lambda m: read_secret(m.group(1)), text)


class FetchProfile(BaseModel):
    """How a website's pages are asked for (see the module's docstring). ``proxies`` is one list or a
    list of tiers (lists); :attr:`tiers` is always tiers, ``((None,),)`` without a proxy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user_agent: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    cookies: dict[str, str] = Field(default_factory=dict)
    proxies: list[str] | list[list[str]] = Field(default_factory=list)
    ban: BanSpec = Field(default_factory=BanSpec)
    session: SessionSpec = Field(default_factory=SessionSpec)
    login: LoginSpec | None = None

    @field_validator("proxies")
    @classmethod
    def _proxies(cls, value: list[str] | list[list[str]]) -> list[str] | list[list[str]]:
        tiers = [value] if value and isinstance(value[0], str) else value
        for tier in tiers:
            if not tier:
                raise ValueError("a proxy tier is empty")
            for proxy in tier:
                _check_proxy(str(proxy))
        return value

    @model_validator(mode="after")
    def _distinct(self) -> FetchProfile:
        seen = [p for tier in self.tiers for p in tier]
        if len(seen) != len(set(seen)):
            raise ValueError("a proxy is listed twice")
        return self

    @property
    def tiers(self) -> tuple[tuple[str | None, ...], ...]:
        """The proxies by tier (the first is used first); no proxy: one tier of one identity, None."""
        value = self.proxies
        if not value:
            return ((None,),)
        if isinstance(value[0], str):
            return (tuple(str(p) for p in value),)
        return tuple(tuple(tier) for tier in value)

    @property
    def identities(self) -> int:
        """How many identities (proxies, or the one direct) the site can be fetched through."""
        return sum(len(t) for t in self.tiers)

    @property
    def page_attempts(self) -> int:
        """How many blocks a page may meet before its job ends "blocked"."""
        return self.ban.page_attempts or 2 * self.identities

    @property
    def sessions_on(self) -> bool:
        """Whether pages go through sessions: something in the profile is not the default."""
        return self != _DEFAULT

    def request_headers(self) -> dict[str, str]:
        """The headers a session of this site sends (User-Agent included when set)."""
        headers = dict(self.headers)
        if self.user_agent:
            headers["User-Agent"] = self.user_agent
        return headers


def _check_proxy(proxy: str) -> None:
    try:
        parts = urlsplit(proxy)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"proxy {redact_url(proxy)!r}: {exc}") from None
    if parts.scheme.lower() not in _PROXY_SCHEMES:
        raise ValueError(
            f"proxy {redact_url(proxy)!r}: scheme must be one of {', '.join(s + '://' for s in _PROXY_SCHEMES)}"
        )
    if not parts.hostname or port is None and parts.scheme.lower().startswith("socks"):
        raise ValueError(f"proxy {redact_url(proxy)!r}: needs a host (and a port for SOCKS)")


_DEFAULT = FetchProfile()
