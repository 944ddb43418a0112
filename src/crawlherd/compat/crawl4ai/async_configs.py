"""crawl4ai's configuration objects (``crawl4ai.async_configs``): :class:`BrowserConfig` for the
crawler, :class:`CrawlerRunConfig` for a run, :class:`ProxyConfig` for a proxy (crawlherd's
:class:`~crawlherd.crawler.proxies.ProxyConfig`).

Every option crawl4ai documents is either honoured or refused with a :class:`~crawlherd.errors.ConfigurationError`
naming it and saying why -- never accepted and ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawlherd.compat.crawl4ai.cache_context import CacheMode, engine_cache_mode
from crawlherd.crawler.config import CrawlerRunConfig as EngineRunConfig
from crawlherd.crawler.proxies import ProxyConfig, proxy_url
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.chromium import BrowserOptions

__all__ = ["BrowserConfig", "CacheMode", "CrawlerRunConfig", "ProxyConfig"]

#: crawl4ai run options crawlherd does not have, and why (or what to use instead).
_REFUSED_RUN = {
    "js_code": "crawlherd does not run scripts in the page; use BrowserFetcher's wait_for or a sitespec",
    "session_id": "crawlherd keeps no page between calls (each fetch gets a fresh page)",
    "extraction_strategy": "use crawlherd's ExtractionRules (crawlherd.extract) on the results",
    "css_selector": "use crawlherd's ExtractionRules (crawlherd.extract) on the results",
    "target_elements": "use crawlherd's ExtractionRules (crawlherd.extract) on the results",
    "pdf": "crawlherd does not print pages to PDF",
    "capture_network_requests": "crawlherd does not record the page's network traffic",
    "capture_console_messages": "crawlherd does not record the page's console",
    "scan_full_page": "scrolling and load-more pagination belong to crawlherd's Pagination (crawlherd.extract)",
    "virtual_scroll_config": "scrolling and load-more pagination belong to crawlherd's Pagination (crawlherd.extract)",
    "url_matcher": "arun_many runs one config for all its URLs: call it once per group of URLs",
    "proxy_session_id": "a run config's proxy and cookies already hold for every request made with it; "
    "a website's sessions bound to a proxy are its fetch profile (docs/fetch-profile.md)",
    "proxy_session_ttl": "a website's fetch profile sets a session's max_age (docs/fetch-profile.md)",
    "proxy_session_auto_release": "a website's fetch profile retires its sessions (docs/fetch-profile.md)",
    "fetch_ssl_certificate": "crawlherd does not report the site's certificate",
}
#: crawl4ai browser options crawlherd does not have, and why.
_REFUSED_BROWSER = {
    "headless": "crawlherd's Chromium is always headless",
    "browser_type": "crawlherd drives Chromium only",
    "use_managed_browser": "crawlherd launches its own Chromium (BrowserOptions.executable_path)",
    "cdp_url": "see BrowserOptions for connecting to a running Chromium",
    "user_data_dir": "crawlherd's browser contexts keep no profile",
    "use_persistent_context": "crawlherd's browser contexts keep no profile",
    "storage_state": "crawlherd's browser contexts keep no profile; give cookies=[...]",
    "java_script_enabled": "crawlherd's BrowserFetcher always runs the page's scripts (use HttpFetcher for none)",
}


def _refuse(kind: str, name: str, known: list[str], refused: dict[str, str]) -> ConfigurationError:
    if name in refused:
        return ConfigurationError(f"{kind}({name}=...): not supported by crawlherd: {refused[name]}")
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return ConfigurationError(f"{kind}({name}=...): crawlherd has no such option{hint}")


@dataclass(frozen=True, init=False)
class CrawlerRunConfig(EngineRunConfig):
    """crawl4ai's ``CrawlerRunConfig``: the engine's :class:`~crawlherd.crawler.config.CrawlerRunConfig`
    (``stream``, ``screenshot``, ``check_robots_txt``, ``headers``, timeouts, ``concurrency``) plus
    crawl4ai's names:

    - ``cache_mode``: a :class:`~crawlherd.compat.crawl4ai.cache_context.CacheMode` (default ``BYPASS``),
      kept as the engine's mode string (``config.cache_mode == "bypass"``).
    - ``markdown_generator``: a ``DefaultMarkdownGenerator``; each successful page's ``result.markdown``
      is then its :class:`~crawlherd.compat.crawl4ai.models.MarkdownGenerationResult`. None (the
      default here, unlike crawl4ai) keeps crawlherd's own markdown, a ``str`` computed when read.
    - ``mean_delay`` / ``max_range`` (0.1 / 0.3): the spacing of ``arun_many``'s default dispatcher,
      ``RateLimiter(base_delay=(mean_delay, mean_delay + max_range))``; ``semaphore_count`` (5): its
      ``max_session_permit``.
    - ``page_timeout``: milliseconds for a whole fetch (the engine's ``total_timeout``).
    - ``wait_for``: a CSS selector the browser waits for (``css:`` prefix allowed); BrowserFetcher only.
    - ``verbose`` (True): one INFO line per page on the ``crawlherd.compat.crawl4ai`` logger.
    - ``deep_crawl_strategy``: refused when set -- use ``crawler.crawl(seeds, max_pages=, max_depth=)``.

    Other crawl4ai options are refused by name (see the migration guide)."""

    markdown_generator: Any = None
    mean_delay: float = 0.1
    max_range: float = 0.3
    semaphore_count: int = 5
    page_timeout: int | None = None
    wait_for: str | None = None
    verbose: bool = True
    deep_crawl_strategy: Any = None

    def __init__(self, **options: Any) -> None:
        names = {f.name for f in dataclasses.fields(self) if f.init}
        for name in options:
            if name not in names:
                raise _refuse("CrawlerRunConfig", name, sorted(names), _REFUSED_RUN)
        for f in dataclasses.fields(self):
            if not f.init:
                continue
            if f.name in options:
                value = options[f.name]
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            else:
                value = f.default
            object.__setattr__(self, f.name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cache_mode", engine_cache_mode(self.cache_mode))
        if self.deep_crawl_strategy is not None:
            raise ConfigurationError(
                "CrawlerRunConfig(deep_crawl_strategy=...): not supported; crawlherd follows links with "
                "crawler.crawl(seeds, max_pages=..., max_depth=...)"
            )
        if self.mean_delay < 0 or self.max_range < 0:
            raise ConfigurationError(
                f"CrawlerRunConfig mean_delay={self.mean_delay!r}, max_range={self.max_range!r}: must be >= 0 seconds"
            )
        if not isinstance(self.semaphore_count, int) or self.semaphore_count < 1:
            raise ConfigurationError(f"CrawlerRunConfig.semaphore_count={self.semaphore_count!r}: an int >= 1")
        if self.page_timeout is not None:
            if not self.page_timeout > 0:
                raise ConfigurationError(f"CrawlerRunConfig.page_timeout={self.page_timeout!r}: milliseconds > 0")
            if self.total_timeout is None:
                object.__setattr__(self, "total_timeout", self.page_timeout / 1000)
        gen = self.markdown_generator
        if gen is not None and not callable(getattr(gen, "generate_markdown", None)):
            raise ConfigurationError(
                f"CrawlerRunConfig.markdown_generator={gen!r}: needs a generate_markdown() (DefaultMarkdownGenerator)"
            )
        super().__post_init__()

    def request_meta(self) -> dict[str, Any]:
        meta = super().request_meta()
        if self.wait_for:
            meta["wait_for"] = self.wait_for.removeprefix("css:")
        return meta


_BROWSER_DEFAULTS: dict[str, Any] = {
    "browser_type": "chromium",
    "headless": True,
    "verbose": True,
    "viewport_width": 1080,
    "viewport_height": 600,
    "user_agent": None,
    "extra_args": (),
    "text_mode": False,
    "java_script_enabled": True,
    "proxy_config": None,
    "cookies": None,
    "headers": None,
}


class BrowserConfig:
    """crawl4ai's ``BrowserConfig``: ``AsyncWebCrawler(config=BrowserConfig(...))`` fetches with
    crawlherd's :class:`~crawlherd.fetch.browser.BrowserFetcher` (the system Chromium, headless).

    Honoured: ``viewport_width`` / ``viewport_height`` (crawl4ai's 1080 x 600 by default),
    ``user_agent``, ``extra_args`` (Chromium switches), ``text_mode`` (no images, media or fonts),
    ``verbose``; the browser's identity for every page: ``proxy_config`` (a ``ProxyConfig``, a URL, or
    crawl4ai's dict; the deprecated ``proxy="http://..."`` too, with crawl4ai's warning), ``cookies``
    (crawl4ai's list of ``{"name", "value", "domain", "path"}`` or ``{"name", "value", "url"}``) and
    ``headers``. A run's own ``CrawlerRunConfig(proxy_config=...)`` or rotation wins over the browser's
    proxy. ``browser_type="chromium"``, ``headless=True`` and ``java_script_enabled=True`` are what
    crawlherd does, so they are accepted and other values refused. Other crawl4ai options are refused by
    name."""

    def __init__(self, **options: Any) -> None:
        legacy = options.pop("proxy", None)
        if legacy is not None:
            warnings.warn("The 'proxy' parameter is deprecated and will be removed in a future release. Use "
                          "'proxy_config' instead.", UserWarning, stacklevel=2)
            options.setdefault("proxy_config", legacy)
        for name, value in options.items():
            if name not in _BROWSER_DEFAULTS:
                raise _refuse("BrowserConfig", name, sorted(_BROWSER_DEFAULTS), _REFUSED_BROWSER)
            if name in ("browser_type", "headless", "java_script_enabled") and value != _BROWSER_DEFAULTS[name]:
                raise ConfigurationError(f"BrowserConfig({name}={value!r}): not supported by crawlherd: "
                                         f"{_REFUSED_BROWSER[name]}")
        values = {**_BROWSER_DEFAULTS, **options}
        self.browser_type: str = values["browser_type"]
        self.headless: bool = values["headless"]
        self.java_script_enabled: bool = values["java_script_enabled"]
        self.verbose: bool = bool(values["verbose"])
        self.viewport_width: int = values["viewport_width"]
        self.viewport_height: int = values["viewport_height"]
        self.user_agent: str | None = values["user_agent"]
        self.extra_args: tuple[str, ...] = tuple(values["extra_args"] or ())
        self.text_mode: bool = bool(values["text_mode"])
        self.proxy_config: ProxyConfig | None = _proxy_config(values["proxy_config"])
        self.cookies: list[dict[str, str]] = [dict(c) for c in values["cookies"] or ()]
        headers = values["headers"] or {}
        if not isinstance(headers, Mapping):
            raise ConfigurationError(f"BrowserConfig(headers={type(headers).__name__}): a dict of name: value")
        self.headers: dict[str, str] = dict(headers)
        self.browser_options()  # checked now, not at the first fetch

    def __repr__(self) -> str:
        return (
            f"BrowserConfig(viewport_width={self.viewport_width}, viewport_height={self.viewport_height}, "
            f"text_mode={self.text_mode}, verbose={self.verbose}, proxy_config={self.proxy_config!r})"
        )

    def clone(self, **changes: Any) -> BrowserConfig:
        """A copy with some options changed."""
        current = {name: getattr(self, name) for name in _BROWSER_DEFAULTS}
        return BrowserConfig(**{**current, **changes})

    def browser_options(self) -> BrowserOptions:
        """The BrowserFetcher options these mean."""
        blocked = ("image", "media", "font") if self.text_mode else ()
        return BrowserOptions(
            viewport_width=self.viewport_width, viewport_height=self.viewport_height,
            extra_args=self.extra_args, block_resource_types=blocked,
            proxy=self.proxy_config.url if self.proxy_config is not None else None,
            cookies=self.cookies, headers=self.headers,
        )

    def limits(self, base: FetchLimits) -> FetchLimits:
        """``base`` with this config's user agent."""
        return dataclasses.replace(base, user_agent=self.user_agent) if self.user_agent else base


def _proxy_config(value: Any) -> ProxyConfig | None:
    """A browser's ``proxy_config`` as crawl4ai normalises it: a ProxyConfig, or None (none or "direct")."""
    if value is None or isinstance(value, ProxyConfig):
        return value
    if isinstance(value, Mapping):
        return ProxyConfig.from_dict(value)  # its "ip" kept
    url = proxy_url(value)  # a string ("direct": None), or the error that says what to give
    return ProxyConfig.from_string(url) if url is not None else None
