"""Crawlo's scheduler layer on crawlherd's frontier, under Crawlo's own module names.

``from crawlo.X import Y`` becomes ``from crawlherd.compat.crawlo.X import Y``: the package tree
mirrors ``crawlo.queue``, ``crawlo.filters``, ``crawlo.core.scheduler`` (see
``docs/migrating-from-crawlo.md`` for every name, where it is and what differs). The settings-driven
entry point of earlier crawlherd releases, :func:`open_crawlo_scheduler` with :class:`CrawloSettings`,
stays here.
"""

from __future__ import annotations

from crawlherd.compat.crawlo.frontier import *  # noqa: F403 - the names of earlier releases, from their module
from crawlherd.compat.crawlo.frontier import __all__ as __all__
