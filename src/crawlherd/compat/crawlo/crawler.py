"""Crawlo's ``CrawloFramework`` (``crawlo.crawler``), for its settings and its scheduler: crawlherd
runs the crawl itself (its worker and dispatchers), so this is the part of Crawlo's framework object
that configures the scheduler layer.

``CrawloFramework(settings=None)``: the project's settings put together as Crawlo does
(:func:`crawlherd.compat.crawlo.project._load_project_settings`, ``settings`` last);
``await framework.open_scheduler()`` opens the
:class:`~crawlherd.compat.crawlo.core.scheduling.task_scheduler.Scheduler` those settings describe.
``reset_framework()`` is Crawlo's reset of its framework singleton; crawlherd keeps none, so each
``CrawloFramework`` stands alone and there is nothing to reset.
"""

from __future__ import annotations

from typing import Any

from crawlherd.compat.crawlo.project import _load_project_settings

__all__ = ["CrawloFramework", "reset_framework"]


class CrawloFramework:
    def __init__(self, settings: dict[str, Any] | None = None, *, settings_module: str | None = None) -> None:
        self.settings = _load_project_settings(custom_settings=settings, settings_module=settings_module)
        self.stats: Any = None
        self.spider: Any = None

    async def open_scheduler(self) -> Any:
        """The scheduler of these settings, open."""
        from crawlherd.compat.crawlo.core.scheduling.task_scheduler import Scheduler

        scheduler = Scheduler.create_instance(self)
        await scheduler.open()
        return scheduler


def reset_framework() -> None:
    """Nothing to reset: crawlherd keeps no framework singleton (see the module docstring)."""
