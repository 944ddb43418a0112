"""Compatibility for users arriving from other crawl frameworks: :mod:`.crawlo` (Crawlo's scheduler
settings, queue and filter on separate backends, its exception names). crawl4ai's names live with the
engine itself (``AsyncWebCrawler``, ``BaseDispatcher``, ``DisplayMode`` ...), exported by ``crawlherd``."""

from __future__ import annotations
