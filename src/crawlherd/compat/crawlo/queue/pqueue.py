"""Crawlo's older module name for the memory queue (``crawlo.queue.pqueue``)."""

from crawlherd.compat.crawlo.queue.backends.memory import SpiderPriorityQueue

__all__ = ["SpiderPriorityQueue"]
