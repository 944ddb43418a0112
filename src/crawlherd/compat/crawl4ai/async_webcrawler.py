"""crawl4ai's ``AsyncWebCrawler`` (``crawl4ai.async_webcrawler``): crawlherd's
:class:`~crawlherd.crawler.Crawler` with crawl4ai's constructor and ``arun_many`` rules.

- ``AsyncWebCrawler(config=BrowserConfig(...))`` fetches with the system Chromium
  (:class:`~crawlherd.fetch.browser.BrowserFetcher`); ``AsyncWebCrawler()`` over HTTP, as crawlherd's
  crawler does (no browser unless asked for).
- Private and loopback addresses are refused unless the crawlherd settings allow them
  (``CRAWLHERD_ALLOW_PRIVATE_ADDRESSES=1`` or ``allow_private_addresses = true`` in ``crawlherd.toml``),
  or ``allow_private_addresses=True`` is passed.
- ``arun_many`` without a dispatcher uses crawl4ai's default: a ``MemoryAdaptiveDispatcher`` with
  ``max_session_permit=config.semaphore_count`` and ``RateLimiter(base_delay=(mean_delay, mean_delay +
  max_range), max_delay=60, max_retries=3)``. A dispatcher that runs the URLs itself (any object with
  ``run_urls``, or a subclass overriding it) is called as crawl4ai calls it --
  ``run_urls(crawler=self, urls=urls, config=config)`` -- and each task's ``result`` is returned with
  its ``dispatch_result``; crawlherd's dispatchers run through the frontier.
- A list of configs is taken as crawl4ai takes it when none has a ``url_matcher``: the first one
  applies to every URL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from crawlherd.compat.crawl4ai.async_configs import BrowserConfig, CrawlerRunConfig
from crawlherd.compat.crawl4ai.async_dispatcher import MemoryAdaptiveDispatcher, RateLimiter
from crawlherd.compat.crawl4ai.models import DispatchResult
from crawlherd.crawler.concurrency.base import BaseDispatcher
from crawlherd.crawler.config import CrawlerRunConfig as EngineRunConfig
from crawlherd.crawler.crawler import Crawler
from crawlherd.crawler.stream import CrawlRun
from crawlherd.errors import ConfigurationError
from crawlherd.fetch.base import FetchLimits
from crawlherd.request import Request
from crawlherd.result import CrawlResult, DispatchInfo

__all__ = ["AsyncWebCrawler"]

log = logging.getLogger("crawlherd.compat.crawl4ai")
_MB = 1024 * 1024
_HTML = ("text/html", "application/xhtml+xml", "")

#: The ``run_urls`` of dispatchers that run through the frontier (not "their own").
_FRONTIER_RUN_URLS = (BaseDispatcher.run_urls, MemoryAdaptiveDispatcher.run_urls)


def runs_urls_itself(dispatcher: object) -> bool:
    """True for a dispatcher crawl4ai-style code drives: not one of crawlherd's, or one whose
    ``run_urls`` was replaced (a subclass, a patch, an attribute of the instance)."""
    if not isinstance(dispatcher, BaseDispatcher):
        return callable(getattr(dispatcher, "run_urls", None))
    if "run_urls" in vars(dispatcher):
        return True
    return getattr(type(dispatcher), "run_urls", None) not in _FRONTIER_RUN_URLS


def _allow_private_from_settings() -> bool:
    from crawlherd.settings import load_settings

    return bool(load_settings().allow_private_addresses)


class AsyncWebCrawler(Crawler):
    """``AsyncWebCrawler(crawler_strategy=None, config=None, **crawler_options)``: ``config`` a
    :class:`~crawlherd.compat.crawl4ai.async_configs.BrowserConfig` (a browser) or None (HTTP);
    ``crawler_options`` are :class:`~crawlherd.crawler.Crawler`'s (``fetcher``, ``limits``,
    ``allow_private_addresses``, ``clock``, ...). ``crawler_strategy`` is refused: the fetcher is
    crawlherd's (pass ``fetcher=``)."""

    def __init__(self, crawler_strategy: Any = None, config: BrowserConfig | None = None, **options: Any) -> None:
        if crawler_strategy is not None:
            raise ConfigurationError(
                "AsyncWebCrawler(crawler_strategy=...): not supported; pass a crawlherd fetcher "
                "(fetcher=HttpFetcher(...) or BrowserFetcher(...))"
            )
        if config is not None and not isinstance(config, BrowserConfig):
            raise ConfigurationError(
                f"AsyncWebCrawler(config={type(config).__name__}): expected a BrowserConfig "
                "(a CrawlerRunConfig goes to arun)"
            )
        if options.get("fetcher") is None and options.get("limits") is None:
            allow = options.pop("allow_private_addresses", None)
            if allow is None:
                allow = _allow_private_from_settings()
            limits = FetchLimits(allow_private_addresses=bool(allow))
            if config is not None:
                from crawlherd.fetch.browser import BrowserFetcher

                options["fetcher"] = BrowserFetcher(config.limits(limits), config.browser_options())
            else:
                options["limits"] = limits
        super().__init__(**options)
        self.browser_config = config
        #: crawl4ai's flag (True once started); kept for code that reads or sets it.
        self.ready = False

    async def __aenter__(self) -> AsyncWebCrawler:
        await super().__aenter__()
        self.ready = True
        return self

    async def arun(self, url_or_request: str | Request | None = None, config: EngineRunConfig | None = None,
                   *, url: str | Request | None = None, **kwargs: Any) -> CrawlResult:
        """Fetch one URL: ``arun(url, config)`` or crawl4ai's ``arun(url=..., config=...)``. crawl4ai's
        other keywords (``session_id`` ...) are refused by name."""
        if kwargs:
            raise ConfigurationError(
                f"arun({', '.join(f'{k}=...' for k in kwargs)}): not supported by crawlherd; put run options in "
                "CrawlerRunConfig"
            )
        if (url is None) == (url_or_request is None):
            raise ConfigurationError("arun: pass one URL, positionally or as url=")
        target = url if url is not None else url_or_request
        assert target is not None
        return await super().arun(target, _first(config) or CrawlerRunConfig())

    async def arun_many(
        self,
        urls_or_requests: Iterable[str | Request] | None = None,
        config: Any = None,
        dispatcher: Any = None,
        *,
        urls: Iterable[str | Request] | None = None,
        stream: bool | None = None,
    ) -> Any:
        """crawl4ai's ``arun_many(urls, config=None, dispatcher=None)``: see the module docstring."""
        if urls is not None and urls_or_requests is not None:
            raise ConfigurationError("arun_many: pass the URLs once, positionally or as urls=, not both")
        items = urls if urls is not None else urls_or_requests
        primary = _first(config) or CrawlerRunConfig()
        if getattr(primary, "deep_crawl_strategy", None) is not None:
            raise ConfigurationError("deep_crawl_strategy: use crawler.crawl(seeds, max_pages=..., max_depth=...)")
        if dispatcher is None:
            mean = float(getattr(primary, "mean_delay", 0.1))
            spread = float(getattr(primary, "max_range", 0.3))
            dispatcher = MemoryAdaptiveDispatcher(
                max_session_permit=max(1, int(getattr(primary, "semaphore_count", 10) or 10)),
                rate_limiter=RateLimiter(base_delay=(mean, mean + spread), max_delay=60.0, max_retries=3),
            )
        use_stream = bool(getattr(primary, "stream", False)) if stream is None else stream
        if runs_urls_itself(dispatcher):
            if items is None or isinstance(items, str | Request):
                raise ConfigurationError("arun_many takes a list of URLs; for one URL use arun()")
            return await self._run_own(dispatcher, list(items), config, use_stream)
        return await super().arun_many(items, dispatcher=dispatcher, config=primary, stream=use_stream)

    async def _run_own(self, dispatcher: Any, urls: list[str | Request], config: Any, stream: bool) -> Any:
        """A crawl4ai-style dispatcher's run, as crawl4ai makes it."""
        plain = [u.url if isinstance(u, Request) else u for u in urls]
        if stream and hasattr(dispatcher, "run_urls_stream"):
            async def results() -> Any:
                number = 0
                async for task in dispatcher.run_urls_stream(crawler=self, urls=plain, config=config):
                    number += 1
                    yield _with_dispatch(task, number)

            return results()
        tasks = await dispatcher.run_urls(crawler=self, urls=plain, config=config)
        return [_with_dispatch(task, number) for number, task in enumerate(tasks, 1)]

    def _dispatcher(self, dispatcher: Any, config: EngineRunConfig, stream: bool) -> Any:
        if isinstance(dispatcher, BaseDispatcher) and not runs_urls_itself(dispatcher):
            return dispatcher
        return super()._dispatcher(dispatcher, config, stream)

    async def _process(self, run: CrawlRun, request: Request) -> CrawlResult:
        result = await super()._process(run, request)
        config = run.config
        generator = getattr(config, "markdown_generator", None)
        if generator is not None and result.success and result.content_type in _HTML:
            result._markdown = generator.generate_markdown(result.html, base_url=result.base_url)
        if getattr(config, "verbose", False) and log.isEnabledFor(logging.INFO):
            log.info("[FETCH] %s %s %s", "ok" if result.success else "failed", result.status_code, result.url)
        return result


def _first(config: Any) -> Any:
    if isinstance(config, list | tuple):
        if not config:
            return None
        for each in config:
            if getattr(each, "url_matcher", None) is not None:
                raise ConfigurationError(
                    "a list of configs with url_matcher: arun_many runs one config for all its URLs; call it once "
                    "per group of URLs"
                )
        return config[0]
    return config


def _with_dispatch(task: Any, number: int) -> Any:
    """A crawl4ai task result's ``result`` with how it ran: crawlherd's ``result.dispatch`` for a
    CrawlResult (task ``number``, memory in bytes), crawl4ai's ``dispatch_result`` for anything else."""
    if isinstance(task, CrawlResult):
        return task
    result = task.result
    if isinstance(result, CrawlResult):
        used = int(float(task.memory_usage) * _MB)
        result.dispatch = DispatchInfo(
            task_id=number, start_time=task.start_time, end_time=task.end_time, memory_at_end=used,
            peak_memory=int(float(task.peak_memory) * _MB), retries=int(getattr(task, "retry_count", 0)),
        )
        return result
    result.dispatch_result = DispatchResult(
        task_id=task.task_id, memory_usage=task.memory_usage, peak_memory=task.peak_memory,
        start_time=task.start_time, end_time=task.end_time, error_message=task.error_message,
    )
    return result
