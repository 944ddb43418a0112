"""Which Chromium, launched how: :func:`find_chromium`, the switches it is launched with, and
:class:`BrowserOptions` (how :class:`~crawlherd.fetch.browser.BrowserFetcher` drives it).

Which Chromium: the ``executable_path`` option, else ``$CRAWLHERD_CHROMIUM``, else ``/usr/bin/chromium``,
else ``chromium`` / ``chromium-browser`` on ``PATH``. crawlherd never downloads a browser
(``apt-get install chromium`` on Debian/Ubuntu).

Or a Chromium already running: the ``cdp_url`` option, else ``$CRAWLHERD_CHROMIUM_CDP_URL`` -- its
DevTools endpoint (``http://127.0.0.1:9222`` or the ``ws://.../devtools/browser/...`` URL it prints),
connected to instead of launching one (:func:`open_browser`). Whoever started it chose its switches:
:data:`CHROMIUM_ARGS`, and :data:`LOCAL_NETWORK_ARGS` when private addresses are allowed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from crawlherd._options import Count, Seconds, check_options
from crawlherd._redact import redact_url
from crawlherd.errors import BrowserUnavailableError, ConfigurationError

__all__ = [
    "CDP_URL_ENV", "CHROMIUM_ARGS", "LOCAL_NETWORK_ARGS", "BrowserOptions", "WaitUntil", "find_chromium", "launch_args",
    "open_browser",
]

#: The environment variable naming a running Chromium's DevTools endpoint (see ``cdp_url``).
CDP_URL_ENV = "CRAWLHERD_CHROMIUM_CDP_URL"

#: Command-line switches Chromium is launched with: no sandbox (containers), no GPU, and none of the
#: background traffic (QUIC, updates, sync) that would bypass the route handler.
CHROMIUM_ARGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
#: Added when private addresses are allowed: Chromium's own local-network-access checks would block a
#: page (whose document the route fulfilled, so it has no address of its own) from reaching loopback
#: or private hosts that the address guard let through. The guard stays the authority.
LOCAL_NETWORK_ARGS: tuple[str, ...] = (
    "--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks",
)
_RESOURCE_TYPES = frozenset(
    {
        "document",
        "stylesheet",
        "image",
        "media",
        "font",
        "script",
        "texttrack",
        "xhr",
        "fetch",
        "eventsource",
        "websocket",
        "manifest",
        "other",
    }
)
_INSTALL_HINT = (
    "install it with `apt-get install chromium` (Debian/Ubuntu) or point CRAWLHERD_CHROMIUM (or the "
    "executable_path option) at a Chromium/Chrome binary; crawlherd never downloads a browser"
)

def find_chromium(executable_path: str | None = None) -> str:
    """The Chromium to launch: ``executable_path``, ``$CRAWLHERD_CHROMIUM``, ``/usr/bin/chromium``,
    then ``chromium`` / ``chromium-browser`` on PATH. An explicit path that is not an executable, or
    no browser at all, raises BrowserUnavailableError."""
    for source, explicit in (
        ("executable_path", executable_path),
        ("CRAWLHERD_CHROMIUM", os.environ.get("CRAWLHERD_CHROMIUM")),
    ):
        if explicit:
            if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
                return explicit
            raise BrowserUnavailableError(f"{source}={explicit!r} is not an executable file; {_INSTALL_HINT}")
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise BrowserUnavailableError(f"no Chromium found; {_INSTALL_HINT}")


WaitUntil = Literal["commit", "domcontentloaded", "load", "networkidle"]


@dataclass(frozen=True, kw_only=True)
class BrowserOptions:
    """How :class:`BrowserFetcher` drives Chromium. ``executable_path`` of the browser (default: see
    :func:`find_chromium`); ``max_pages`` open at once; ``wait_until`` a page is ``load``-ed (or
    ``domcontentloaded``, ``networkidle``, ``commit``) and then, if given, until the CSS selector
    ``wait_for`` is on it; ``screenshot`` of every page (a PNG); ``block_resource_types`` the page may
    not load (e.g. ``image``, ``font``; never ``document``); ``extra_args`` for Chromium;
    ``launch_timeout`` seconds for the browser to start (or to connect to); ``cdp_url`` a running
    Chromium's DevTools endpoint to connect to instead of launching one (default
    ``$CRAWLHERD_CHROMIUM_CDP_URL``); ``viewport_width`` / ``viewport_height`` of every page in CSS
    pixels (None: Playwright's 1280 x 720).

    The browser's own identity, for every page (crawl4ai's ``BrowserConfig(proxy_config=, cookies=,
    headers=)``): ``proxy`` a URL (``http://``, ``https://``, ``socks5://``, credentials in it) every
    context goes through unless a request's session names its own; ``cookies`` (crawl4ai's
    ``{"name", "value", "domain" | "url", "path"}``) every context starts with; ``headers`` every page
    sends (a session's own headers over them)."""

    executable_path: str | None = None
    max_pages: Count = 4
    wait_until: WaitUntil = "networkidle"
    wait_for: str | None = None
    screenshot: bool = False
    block_resource_types: Iterable[str] = ()
    extra_args: Iterable[str] = ()
    launch_timeout: Seconds = 30.0
    viewport_width: Count | None = None
    viewport_height: Count | None = None
    cdp_url: str | None = None
    proxy: str | None = field(default=None, repr=False)
    cookies: Iterable[Mapping[str, str]] = field(default=(), repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_options(self, "BrowserFetcher")
        object.__setattr__(self, "cookies", check_cookies(self.cookies))
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in dict(self.headers or {}).items()})
        if self.proxy is not None:
            check_proxy(self.proxy, "BrowserFetcher proxy")
        if self.wait_for is not None and (not isinstance(self.wait_for, str) or not self.wait_for.strip()):
            raise ConfigurationError(f"BrowserFetcher wait_for must be a non-empty selector, got {self.wait_for!r}")
        blocked = frozenset(self.block_resource_types)
        if blocked - _RESOURCE_TYPES:
            raise ConfigurationError(
                f"BrowserFetcher block_resource_types: unknown {sorted(blocked - _RESOURCE_TYPES)}; "
                f"known: {sorted(_RESOURCE_TYPES)}"
            )
        if "document" in blocked:
            raise ConfigurationError("BrowserFetcher block_resource_types cannot block 'document'")
        object.__setattr__(self, "block_resource_types", blocked)
        object.__setattr__(self, "extra_args", tuple(self.extra_args))


#: The proxy schemes Chromium speaks.
BROWSER_PROXY_SCHEMES = ("http", "https", "socks5")


def check_proxy(url: str, label: str) -> None:
    """Refuse a proxy URL Chromium cannot use (the message never shows its password)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises here
    except (ValueError, AttributeError):
        raise ConfigurationError(f"{label} {redact_url(str(url))!r}: not a proxy URL") from None
    if parts.scheme not in BROWSER_PROXY_SCHEMES or not parts.hostname:
        raise ConfigurationError(
            f"{label} {redact_url(url)!r}: must be an http://, https:// or socks5:// URL with a host"
        )


def check_cookies(cookies: Iterable[Mapping[str, str]]) -> tuple[dict[str, str], ...]:
    """crawl4ai's / Playwright's cookies, checked: each a ``name`` and ``value``, and a ``domain`` (with
    ``path``, "/" by default) or a ``url``."""
    out = []
    for c in cookies or ():
        if not isinstance(c, Mapping) or not c.get("name") or "value" not in c:
            raise ConfigurationError(f"cookie {c!r}: needs a 'name' and a 'value'")
        cookie = {str(k): v for k, v in c.items()}
        if cookie.get("domain"):
            cookie.setdefault("path", "/")
        elif not cookie.get("url"):
            raise ConfigurationError(f"cookie {cookie['name']!r}: give its 'domain' (and 'path') or a 'url'")
        out.append(cookie)
    return tuple(out)


def launch_args(options: BrowserOptions, *, allow_private: bool) -> list[str]:
    """Chromium's command line: :data:`CHROMIUM_ARGS`, :data:`LOCAL_NETWORK_ARGS` when private
    addresses are allowed, then the options' ``extra_args``."""
    return [*CHROMIUM_ARGS, *(LOCAL_NETWORK_ARGS if allow_private else ()), *options.extra_args]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def open_browser(options: BrowserOptions, *, allow_private: bool) -> tuple[Any, Any, Any]:
    """Start Playwright and launch Chromium -- or connect to the one at ``cdp_url`` (the option, else
    ``$CRAWLHERD_CHROMIUM_CDP_URL``): (playwright, browser, the ``playwright.async_api`` module).
    BrowserUnavailableError when Playwright or the browser is missing or does not start."""
    try:
        import playwright.async_api as pw_api
    except ImportError:
        raise BrowserUnavailableError(
            "Playwright is not installed: pip install 'crawlherd[browser]' (the browser itself comes "
            "from the system: apt-get install chromium)"
        ) from None
    cdp_url = options.cdp_url or os.environ.get(CDP_URL_ENV) or None
    executable = None if cdp_url else find_chromium(options.executable_path)
    playwright = await pw_api.async_playwright().start()
    try:
        if cdp_url:
            browser = await playwright.chromium.connect_over_cdp(cdp_url, timeout=options.launch_timeout * 1000)
        else:
            browser = await playwright.chromium.launch(
                executable_path=executable,
                headless=True,
                args=launch_args(options, allow_private=allow_private),
                timeout=options.launch_timeout * 1000,
            )
    except pw_api.Error as exc:
        with contextlib.suppress(Exception):
            await playwright.stop()
        where = f"connect to the Chromium at {cdp_url}" if cdp_url else f"start Chromium at {executable}"
        raise BrowserUnavailableError(f"could not {where}: {_first_line(exc)}") from None
    except BaseException:
        with contextlib.suppress(Exception):
            await playwright.stop()
        raise
    return playwright, browser, pw_api
