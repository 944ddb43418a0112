"""Dispatchers: run the frontier's requests with bounded concurrency, per-domain rate limiting and a
monitor. See :mod:`crawlherd.crawler.concurrency.base` for the protocol."""

from __future__ import annotations

from crawlherd.crawler.concurrency.base import Dispatcher, ProcessFn
from crawlherd.crawler.concurrency.memory_adaptive import MemoryAdaptiveDispatcher
from crawlherd.crawler.concurrency.memory_usage import ProcessMemory, SystemMemory
from crawlherd.crawler.concurrency.monitor import CrawlerMonitor
from crawlherd.crawler.concurrency.rate_limiter import RateLimiter, parse_retry_after
from crawlherd.crawler.concurrency.semaphore import SemaphoreDispatcher

__all__ = [
    "CrawlerMonitor",
    "Dispatcher",
    "MemoryAdaptiveDispatcher",
    "ProcessFn",
    "ProcessMemory",
    "RateLimiter",
    "SemaphoreDispatcher",
    "SystemMemory",
    "parse_retry_after",
]
