"""crawl4ai's data types (``crawl4ai.models``): what its dispatchers and monitor pass around.

``CrawlResult`` is crawlherd's own (:class:`crawlherd.result.CrawlResult`); the markdown a
:class:`~crawlherd.compat.crawl4ai.markdown_generation_strategy.DefaultMarkdownGenerator` makes is a
:class:`MarkdownGenerationResult`, a ``str`` (the raw markdown) with crawl4ai's attributes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from crawlherd.crawler.concurrency.monitor import DisplayMode
from crawlherd.result import CrawlResult

__all__ = [
    "CrawlResult",
    "CrawlStats",
    "CrawlStatus",
    "CrawlerTaskResult",
    "DispatchResult",
    "DisplayMode",
    "MarkdownGenerationResult",
]


class CrawlStatus(enum.Enum):
    """Where a task is: queued, running, done or failed (the monitor reports its ``name``)."""

    QUEUED = "QUEUED"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


@dataclass
class CrawlerTaskResult:
    """One URL run by a dispatcher's ``crawl_url``: the crawler's ``result`` and how the task went
    (times in seconds since the epoch, memory in MB of the process's RSS)."""

    task_id: str
    url: str
    result: Any
    memory_usage: float
    peak_memory: float
    start_time: float
    end_time: float
    error_message: str = ""
    retry_count: int = 0
    wait_time: float = 0.0

    @property
    def success(self) -> bool:
        return bool(getattr(self.result, "success", False))


@dataclass
class DispatchResult:
    """What ``arun_many`` attaches to a result of a crawl4ai-style dispatcher (``result.dispatch_result``)."""

    task_id: str
    memory_usage: float
    peak_memory: float
    start_time: float
    end_time: float
    error_message: str = ""


@dataclass
class CrawlStats:
    """One task as the monitor keeps it (``monitor.stats[task_id]``)."""

    task_id: str
    url: str
    status: CrawlStatus = CrawlStatus.QUEUED
    enqueue_time: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    memory_usage: float = 0.0
    peak_memory: float = 0.0
    error_message: str = ""
    wait_time: float = 0.0
    retry_count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "url": self.url,
            "status": self.status.name,
            "enqueue_time": self.enqueue_time,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "memory_usage": self.memory_usage,
            "peak_memory": self.peak_memory,
            "error_message": self.error_message,
            "wait_time": self.wait_time,
            "retry_count": self.retry_count,
        }


class MarkdownGenerationResult(str):
    """A page's markdown as crawl4ai gives it: the string itself is ``raw_markdown``; also
    ``markdown_with_citations`` (links as numbered citations), ``references_markdown`` (the numbered
    link list), ``fit_markdown`` and ``fit_html`` (the content filter's output; empty without one)."""

    raw_markdown: str
    markdown_with_citations: str
    references_markdown: str
    fit_markdown: str
    fit_html: str

    def __new__(
        cls,
        raw_markdown: str,
        markdown_with_citations: str = "",
        references_markdown: str = "",
        fit_markdown: str = "",
        fit_html: str = "",
    ) -> MarkdownGenerationResult:
        self = super().__new__(cls, raw_markdown)
        self.raw_markdown = raw_markdown
        self.markdown_with_citations = markdown_with_citations
        self.references_markdown = references_markdown
        self.fit_markdown = fit_markdown
        self.fit_html = fit_html
        return self
