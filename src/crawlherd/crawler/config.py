"""``CrawlerRunConfig``: the per-run options of the :class:`~crawlherd.crawler.Crawler`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from crawlherd.errors import ConfigurationError
from crawlherd.fetch.actions import PAGE_META, PageActions

__all__ = ["CacheMode", "CrawlerRunConfig"]

CacheMode = Literal["bypass", "enabled", "refresh", "read_only"]
_CACHE_MODES = ("bypass", "enabled", "refresh", "read_only")


@dataclass(frozen=True)
class CrawlerRunConfig:
    """Per-run options.

    - ``stream``: ``arun_many`` returns an async iterator (completion order) instead of a list.
    - ``connect_timeout``, ``read_timeout``, ``total_timeout``: override the fetcher's limits (None
      keeps them).
    - ``headers``: sent with every request of the run, on top of the fetcher's.
    - ``check_robots_txt``: obey robots.txt (a disallowed URL gives a failed result,
      ``RobotsDisallowedError``); its ``Crawl-delay`` becomes the frontier's delay for that host.
    - ``screenshot``: a full-page PNG of the rendered page in ``CrawlResult.screenshot`` (base64, as
      crawl4ai's). The default crawler renders such requests in Chromium
      (:mod:`crawlherd.crawler.renderer`); a crawler given a fetcher that cannot render (an HTTP one)
      logs a warning saying so, once, and its results have ``screenshot=None``.
    - ``wait_for``: crawl4ai's ``"css:<selector>"`` / ``"js:<expression>"`` (or a bare selector): the
      page is taken once it holds (rendered in a browser, as ``screenshot``).
    - ``page_actions``: a :class:`~crawlherd.fetch.actions.PageActions` -- ``wait_for`` with a timeout,
      ``scroll`` or ``load_more`` pagination inside the page (rendered in a browser, as ``screenshot``).
    - ``cache_mode``: ``bypass`` (always fetch, keep nothing), ``enabled`` (a URL fetched successfully
      earlier by this crawler is answered from memory), ``refresh`` (always fetch, update the cache),
      ``read_only`` (answered from the cache when there, never added to it).
    - ``concurrency``: requests in flight when no dispatcher is given.
    - ``user_agent``, ``cookies`` (``{name: value}`` or crawl4ai's list of ``{"name", "value", "domain",
      "path"}``), ``proxy_config`` (a :class:`~crawlherd.crawler.proxies.ProxyConfig`, a URL such as
      ``socks5://user:pw@host:1080``, or crawl4ai's dict) and ``proxy_rotation_strategy`` (a
      :class:`~crawlherd.crawler.proxies.RoundRobinProxyStrategy`): every request of the run goes under
      one run session with these (:mod:`crawlherd.crawler.proxies`), and the cookies sites set are sent
      back for the rest of the run. Politeness stays per host, whatever the proxy.
    """

    stream: bool = False
    connect_timeout: float | None = None
    read_timeout: float | None = None
    total_timeout: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    check_robots_txt: bool = False
    screenshot: bool = False
    cache_mode: CacheMode = "bypass"
    concurrency: int = 16
    wait_for: str | None = None
    page_actions: PageActions | None = None
    user_agent: str | None = None
    cookies: Mapping[str, str] | Sequence[Mapping[str, str]] | None = None
    proxy_config: Any = None
    proxy_rotation_strategy: Any = None

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigurationError(f"CrawlerRunConfig.{name}={value!r}: must be > 0 seconds or None")
        if self.cache_mode not in _CACHE_MODES:
            raise ConfigurationError(f"CrawlerRunConfig.cache_mode={self.cache_mode!r}: use one of {_CACHE_MODES}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigurationError(f"CrawlerRunConfig.concurrency={self.concurrency!r}: must be an int >= 1")
        if self.page_actions is not None and not isinstance(self.page_actions, PageActions):
            raise ConfigurationError("CrawlerRunConfig.page_actions must be a crawlherd.fetch.actions.PageActions")
        if self.wait_for is not None:
            PageActions(wait_for=self.wait_for)  # a bad condition is refused here
        if self.proxy_config is not None or self.proxy_rotation_strategy is not None:
            from crawlherd.crawler.proxies import RunSession

            RunSession(self)  # a bad proxy or strategy is refused here, not at the first fetch

    def clone(self, **changes: Any) -> CrawlerRunConfig:
        """A copy with some options changed."""
        return dataclasses.replace(self, **changes)

    def request_meta(self) -> dict[str, Any]:
        """The per-request overrides fetchers read from ``Request.meta``."""
        meta: dict[str, Any] = {}
        if self.connect_timeout or self.read_timeout or self.total_timeout:
            meta["crawlherd.timeouts"] = {
                "connect": self.connect_timeout,
                "read": self.read_timeout,
                "total": self.total_timeout,
            }
        if self.screenshot:
            meta["crawlherd.screenshot"] = True
        actions = self.page_actions or PageActions()
        if self.wait_for is not None:
            actions = dataclasses.replace(actions, wait_for=self.wait_for)
        if actions:
            meta[PAGE_META] = actions.to_meta()
        return meta
