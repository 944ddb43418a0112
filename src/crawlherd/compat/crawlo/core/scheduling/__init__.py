"""Crawlo's ``crawlo.core.scheduling``: :class:`~.task_scheduler.Scheduler`."""

from crawlherd.compat.crawlo.core.scheduling.task_scheduler import Scheduler

__all__ = ["Scheduler"]
