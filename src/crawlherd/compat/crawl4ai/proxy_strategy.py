"""crawl4ai's proxy rotation (``crawl4ai.proxy_strategy``): :class:`RoundRobinProxyStrategy`, the
:class:`ProxyRotationStrategy` protocol, and :class:`ProxyConfig` (crawl4ai keeps it here too, for code
that still imports it from this module) -- crawlherd's own (:mod:`crawlherd.crawler.proxies`).

``CrawlerRunConfig(proxy_rotation_strategy=RoundRobinProxyStrategy(proxies))`` sends each request of
the run through the next proxy in turn, under the run's session (its cookies and headers)."""

from __future__ import annotations

from crawlherd.crawler.proxies import ProxyConfig, ProxyRotationStrategy, RoundRobinProxyStrategy

__all__ = ["ProxyConfig", "ProxyRotationStrategy", "RoundRobinProxyStrategy"]
