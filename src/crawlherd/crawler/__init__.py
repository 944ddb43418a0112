"""The crawl engine's library API: :class:`Crawler` (:mod:`.crawler`), its per-run options
:class:`CrawlerRunConfig` (:mod:`.config`) and the stream of a run's results :class:`CrawlStream`
(:mod:`.stream`). Link extraction lives in :mod:`crawlherd.extract.links`, the per-host send gate in
:mod:`crawlherd.fetch.gate`."""

from __future__ import annotations

from crawlherd.crawler.config import CacheMode, CrawlerRunConfig
from crawlherd.crawler.crawler import Crawler
from crawlherd.crawler.stream import CrawlRun, CrawlStream

__all__ = ["CacheMode", "CrawlRun", "CrawlStream", "Crawler", "CrawlerRunConfig"]
