"""Dispatchers: run the frontier's requests with bounded concurrency, per-domain rate limiting and a
monitor. See :mod:`crawlherd.dispatch.base` for the protocol."""

from __future__ import annotations

from crawlherd.dispatch.base import Dispatcher, ProcessFn
from crawlherd.dispatch.memory import ProcessMemory, SystemMemory
from crawlherd.dispatch.memory_adaptive import MemoryAdaptiveDispatcher
from crawlherd.dispatch.monitor import CrawlerMonitor
from crawlherd.dispatch.rate_limiter import RateLimiter, parse_retry_after
from crawlherd.dispatch.semaphore import SemaphoreDispatcher

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
