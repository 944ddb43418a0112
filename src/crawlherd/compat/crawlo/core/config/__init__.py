"""Crawlo's configuration centre (``crawlo.core.config``): :class:`CrawloConfig` (run-mode presets),
:data:`BASE_CONFIG`, :data:`MODE_CONFIG_MAP`, :class:`RunMode`, :class:`ConfigValidator`."""

from __future__ import annotations

from crawlherd.compat.crawlo.core.config.base import BASE_CONFIG, MODE_CONFIG_MAP, RunMode
from crawlherd.compat.crawlo.core.config.factories import ConfigValidator, CrawloConfig

__all__ = ["BASE_CONFIG", "MODE_CONFIG_MAP", "ConfigValidator", "CrawloConfig", "RunMode"]
