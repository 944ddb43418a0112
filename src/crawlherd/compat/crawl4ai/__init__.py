"""crawl4ai's names on crawlherd: ``from crawl4ai import X`` becomes
``from crawlherd.compat.crawl4ai import X``, and ``from crawl4ai.<module> import X`` becomes
``from crawlherd.compat.crawl4ai.<module> import X`` for the modules mirrored here:
``async_webcrawler``, ``async_configs``, ``async_dispatcher``, ``cache_context``, ``models``,
``components.crawler_monitor``, ``markdown_generation_strategy``, ``content_filter_strategy``,
``extraction_strategy``, ``proxy_strategy``. What each name does and where it differs from crawl4ai:
``docs/migrating-from-crawl4ai.md``."""

from __future__ import annotations

from crawlherd.compat.crawl4ai.async_configs import BrowserConfig, CrawlerRunConfig, ProxyConfig
from crawlherd.compat.crawl4ai.async_dispatcher import (
    BaseDispatcher,
    MemoryAdaptiveDispatcher,
    RateLimiter,
    SemaphoreDispatcher,
)
from crawlherd.compat.crawl4ai.async_webcrawler import AsyncWebCrawler
from crawlherd.compat.crawl4ai.cache_context import CacheMode
from crawlherd.compat.crawl4ai.components.crawler_monitor import CrawlerMonitor
from crawlherd.compat.crawl4ai.content_filter_strategy import PruningContentFilter, RelevantContentFilter
from crawlherd.compat.crawl4ai.extraction_strategy import ExtractionStrategy
from crawlherd.compat.crawl4ai.markdown_generation_strategy import DefaultMarkdownGenerator, MarkdownGenerationStrategy
from crawlherd.compat.crawl4ai.models import (
    CrawlerTaskResult,
    CrawlResult,
    CrawlStats,
    CrawlStatus,
    DispatchResult,
    DisplayMode,
    MarkdownGenerationResult,
)
from crawlherd.compat.crawl4ai.proxy_strategy import ProxyRotationStrategy, RoundRobinProxyStrategy

__all__ = [
    "AsyncWebCrawler",
    "BaseDispatcher",
    "BrowserConfig",
    "CacheMode",
    "CrawlResult",
    "CrawlStats",
    "CrawlStatus",
    "CrawlerMonitor",
    "CrawlerRunConfig",
    "CrawlerTaskResult",
    "DefaultMarkdownGenerator",
    "DispatchResult",
    "DisplayMode",
    "ExtractionStrategy",
    "MarkdownGenerationResult",
    "MarkdownGenerationStrategy",
    "MemoryAdaptiveDispatcher",
    "ProxyConfig",
    "ProxyRotationStrategy",
    "PruningContentFilter",
    "RateLimiter",
    "RelevantContentFilter",
    "RoundRobinProxyStrategy",
    "SemaphoreDispatcher",
]
