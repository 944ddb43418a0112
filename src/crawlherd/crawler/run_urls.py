"""crawl4ai's custom dispatchers: a dispatcher written as crawl4ai documents one runs the URLs itself
(``run_urls(urls, crawler, config)``, ``run_urls_stream`` when streaming). :class:`RunUrlsAdapter` runs
one inside the crawler's usual stream. (crawl4ai's names are in :mod:`crawlherd.compat.crawl4ai`.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from crawlherd.clock import Clock
from crawlherd.errors import ConfigurationError
from crawlherd.frontier.base import Frontier, Lease
from crawlherd.result import CrawlResult

__all__ = ["RunUrlsAdapter", "RunUrlsDispatcher"]


class RunUrlsDispatcher(Protocol):
    """A dispatcher written as crawl4ai documents one: it runs the URLs itself, calling
    ``crawler.arun(url, config=config)`` (``self.crawler`` is set before ``run_urls`` is called)."""

    async def run_urls(self, urls: list[str], crawler: Any, config: Any) -> Any: ...


def _task_result(item: Any) -> CrawlResult:
    """A CrawlResult from what a crawl4ai-style ``run_urls`` returns: a CrawlResult, or a task result
    carrying one in ``.result`` (crawl4ai's ``CrawlerTaskResult``)."""
    if isinstance(item, CrawlResult):
        return item
    inner = getattr(item, "result", None)
    if isinstance(inner, CrawlResult):
        return inner
    raise ConfigurationError(
        f"a custom dispatcher's run_urls returned {type(item).__name__}: expected CrawlResult objects (what "
        "crawler.arun returns) or task results with the CrawlResult in .result"
    )


class RunUrlsAdapter:
    """Runs a crawl4ai-style dispatcher inside the crawler's usual stream: it takes every URL out of
    the run's frontier, hands them to ``run_urls`` (``run_urls_stream`` when it has one) and reports
    what it returns. The dispatcher owns concurrency and rate limiting; the frontier only keeps the
    one-result-per-URL bookkeeping (repeated URLs answered twice)."""

    def __init__(self, inner: RunUrlsDispatcher, crawler: Any, config: Any, *, stream: bool) -> None:
        self.inner = inner
        self.crawler = crawler
        self.config = config
        self.stream = stream
        self.rate_limiter: Any = None  # the dispatcher keeps its own
        self.monitor: Any = None

    async def run(
        self, frontier: Frontier, process: Any, *, clock: Clock | None = None, rate_limit_at_send: bool = False
    ) -> AsyncIterator[CrawlResult]:
        leases: list[Lease] = []
        while (lease := await frontier.next_request()) is not None:
            leases.append(lease)
        for lease in leases:
            await frontier.ack(lease)
        urls = [lease.request.url for lease in leases]
        inner: Any = self.inner
        inner.crawler = self.crawler
        if self.stream and hasattr(inner, "run_urls_stream"):
            async for item in inner.run_urls_stream(urls=urls, crawler=self.crawler, config=self.config):
                yield _task_result(item)
            return
        for item in await inner.run_urls(urls=urls, crawler=self.crawler, config=self.config):
            yield _task_result(item)
