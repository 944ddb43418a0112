"""Crawlo's ``PriorityCalculator`` (``crawlo.queue.priority_calculator``): per-domain and per-URL
statistics and the priority adjustment Crawlo derives from them, with bounded memory (at most
``MAX_DOMAINS`` domains and ``MAX_URLS`` URLs remembered; past either the oldest are forgotten, a
domain's related statistics with it).

The adjustment (:meth:`calculate_priority`, from the request's own priority): -2 for a domain used in
the last 5 s (-1 within 30 s), -1 past 10 requests to it, minus the times a URL was seen beyond the
first, minus ``meta["depth"]``, -1 for a domain answering in over 5 s on average (+1 under 1 s), minus
its errors (at most 5) past 3, +1 for ``meta["content_type"]`` html/json/xml, -1 past 100 requests to a
domain in the last hour. crawlherd's :class:`~crawlherd.compat.crawlo.queue.queue_manager.QueueManager`
keeps these statistics but orders by the priority it is given (see the migration guide)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

__all__ = ["PriorityCalculator"]


class PriorityCalculator:
    MAX_DOMAINS = 1000
    MAX_URLS = 10000

    def __init__(self) -> None:
        self.domain_stats: dict[str, dict[str, float]] = {}
        self.url_stats: dict[str, int] = {}
        self.last_request_time: dict[str, float] = {}
        self.response_times: dict[str, list[float]] = {}
        self.error_counts: dict[str, int] = {}
        self.crawl_frequency: dict[str, dict[str, float]] = {}

    @staticmethod
    def _extract_domain(url: str) -> str:
        try:
            return urlsplit(url).netloc or "unknown"
        except ValueError:
            return "unknown"

    def calculate_priority(self, request: Any) -> int:
        priority = int(getattr(request, "priority", 0) or 0)
        domain = self._extract_domain(request.url)
        meta = getattr(request, "meta", None) or {}
        seen = self.domain_stats.get(domain)
        if seen is not None:
            since = time.time() - seen["last_time"]
            priority -= 2 if since < 5 else 1 if since < 30 else 0
            priority -= 1 if seen["count"] > 10 else 0
        visits = self.url_stats.get(request.url, 0)
        if visits > 1:
            priority -= visits
        priority -= int(meta.get("depth", 0) or 0)
        times = self.response_times.get(domain)
        if times:
            mean = sum(times) / len(times)
            priority += -1 if mean > 5.0 else 1 if mean < 1.0 else 0
        errors = self.error_counts.get(domain, 0)
        if errors > 3:
            priority -= min(errors, 5)
        if meta.get("content_type", "") in ("html", "json", "xml"):
            priority += 1
        if self.crawl_frequency.get(domain, {}).get("last_hour_count", 0) > 100:
            priority -= 1
        return priority

    def update_stats(self, request: Any) -> None:
        domain = self._extract_domain(request.url)
        now = time.time()
        if domain not in self.domain_stats:
            if len(self.domain_stats) >= self.MAX_DOMAINS:
                self._evict_oldest_domain()
            self.domain_stats[domain] = {"count": 0, "last_time": 0.0}
        stats = self.domain_stats[domain]
        stats["count"] += 1
        stats["last_time"] = now
        if request.url not in self.url_stats:
            if len(self.url_stats) >= self.MAX_URLS:
                self._evict_oldest_urls(max(1, self.MAX_URLS // 10))
            self.url_stats[request.url] = 0
        self.url_stats[request.url] += 1
        self.last_request_time[domain] = now

    def _evict_oldest_domain(self) -> None:
        if not self.domain_stats:
            return
        oldest = min(self.domain_stats, key=lambda d: self.domain_stats[d]["last_time"])
        for table in (self.domain_stats, self.error_counts, self.crawl_frequency, self.response_times,
                      self.last_request_time):
            table.pop(oldest, None)

    def _evict_oldest_urls(self, count: int) -> None:
        for url in list(self.url_stats)[:count]:
            del self.url_stats[url]

    def update_response_time(self, request: Any, response_time: float) -> None:
        times = self.response_times.setdefault(self._extract_domain(request.url), [])
        times.append(response_time)
        del times[:-10]

    def update_error_count(self, request: Any, has_error: bool = True) -> None:
        domain = self._extract_domain(request.url)
        count = self.error_counts.get(domain, 0)
        self.error_counts[domain] = count + 1 if has_error else max(0, count - 1)

    def update_crawl_frequency(self, request: Any) -> None:
        domain = self._extract_domain(request.url)
        now = time.time()
        freq = self.crawl_frequency.setdefault(domain, {"last_hour_count": 0, "last_update": now})
        if now - freq["last_update"] > 3600:
            freq["last_hour_count"] = 0
            freq["last_update"] = now
        freq["last_hour_count"] += 1
