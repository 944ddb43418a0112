"""Compatibility for users arriving from other crawl frameworks, under those frameworks' own module
names: :mod:`.crawl4ai` (crawl4ai's dispatcher framework: ``BrowserConfig``, ``CacheMode``, the
dispatcher internals, the monitor, markdown and pruning) and :mod:`.crawlo` (Crawlo's scheduler layer:
``crawlo.queue``, ``crawlo.filters``, ``crawlo.core.scheduling``, its run-mode settings). The names of
crawl4ai's dispatcher chapter are also the engine's own, exported by ``crawlherd``.

This package sits above the engine (``crawlherd.crawler``) in the layers: it extends the crawler and
its dispatchers, and nothing below imports it."""

from __future__ import annotations
