"""crawlherd keeps many crawlers fed, polite and accountable.

The public API is re-exported here; heavier parts (the crawler, fetchers, dispatch service) are
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from crawlherd.clock import Clock, FakeClock, SystemClock
from crawlherd.errors import CrawlherdError, InvalidURLError
from crawlherd.frontier import Frontier, Lease, open_scheduler
from crawlherd.request import Request
from crawlherd.settings import Settings, load_settings
from crawlherd.url import canonicalize_url

__version__ = "0.1.0"

# name -> module, imported lazily by __getattr__.
_LAZY: dict[str, str] = {
    "AsyncWebCrawler": "crawlherd.crawler.crawler",
    "BaseDispatcher": "crawlherd.crawler.concurrency.base",
    "Crawler": "crawlherd.crawler",
    "CrawlerRunConfig": "crawlherd.crawler",
    "ProxyConfig": "crawlherd.crawler.proxies",
    "RoundRobinProxyStrategy": "crawlherd.crawler.proxies",
    "FetchProfile": "crawlherd.fetchprofile",
    "CrawlResult": "crawlherd.result",
    "CrawloConfig": "crawlherd.compat.crawlo",
    "open_crawlo_scheduler": "crawlherd.compat.crawlo",
    "CrawlerMonitor": "crawlherd.crawler.concurrency.monitor",
    "DisplayMode": "crawlherd.crawler.concurrency.monitor",
    "HttpFetcher": "crawlherd.fetch.http",
    "MemoryAdaptiveDispatcher": "crawlherd.crawler.concurrency.memory_adaptive",
    "RateLimiter": "crawlherd.crawler.concurrency.rate_limiter",
    "SemaphoreDispatcher": "crawlherd.crawler.concurrency.semaphore",
    "BrowserFetcher": "crawlherd.fetch.browser",
    "BrowserOptions": "crawlherd.fetch.browser",
    "DemoSite": "crawlherd.demo",
    "ExtractionRules": "crawlherd.extract.rules",
    "Item": "crawlherd.item",
    "make_item": "crawlherd.item",
    "Pagination": "crawlherd.extract.pagination",
    "register_handler": "crawlherd.extract.handlers",
    "Broker": "crawlherd.brokers",
    "DeadLetter": "crawlherd.brokers",
    "Delivery": "crawlherd.brokers",
    "open_broker": "crawlherd.brokers",
    "DispatchService": "crawlherd.dispatch.dispatch_service",
    "DispatchOptions": "crawlherd.dispatch.dispatch_service",
    "JobMessage": "crawlherd.messages",
    "decode_job": "crawlherd.messages",
    "encode_job": "crawlherd.messages",
}

__all__ = [
    "Clock",
    "CrawlherdError",
    "FakeClock",
    "InvalidURLError",
    "Lease",
    "Request",
    "Frontier",
    "Settings",
    "SystemClock",
    "canonicalize_url",
    "load_settings",
    "open_scheduler",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'crawlherd' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
