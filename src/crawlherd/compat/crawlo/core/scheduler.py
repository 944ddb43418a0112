"""Crawlo's ``crawlo.core.scheduler`` (its earlier module of the scheduler)."""

from crawlherd.compat.crawlo.core.scheduling.task_scheduler import Scheduler

__all__ = ["Scheduler"]
