"""What a crawl hands back: exactly one :class:`CrawlResult` per URL, success or not."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crawlherd.content_type import HasBody
from crawlherd.request import Request

__all__ = ["CrawlResult", "DispatchInfo"]


@dataclass(slots=True)
class DispatchInfo:
    """How the dispatcher ran one URL: its task id, wall-clock start and end (the crawler's clock),
    process memory (bytes, RSS) when it started, ended and the peak seen meanwhile, and how many
    times it was re-fetched (rate limiting) or re-queued (memory pressure)."""

    task_id: int
    start_time: float
    end_time: float = 0.0
    memory_at_start: int = 0
    memory_at_end: int = 0
    peak_memory: int = 0
    retries: int = 0
    requeues: int = 0

    @property
    def duration(self) -> float:
        return max(0.0, self.end_time - self.start_time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "memory_at_start": self.memory_at_start,
            "memory_at_end": self.memory_at_end,
            "peak_memory": self.peak_memory,
            "retries": self.retries,
            "requeues": self.requeues,
        }


@dataclass(slots=True)
class CrawlResult(HasBody):
    """The outcome of one URL.

    ``success`` is True for a fetched page with a status below 400. ``status_code`` is None when no
    response arrived (timeout, refused address, reset ...); ``error_message`` then says why, and
    ``error_type`` names the crawlherd error class. ``url`` is the URL as asked for, ``final_url`` the
    one after redirects. ``elapsed`` is the fetch time in seconds; ``dispatch`` the dispatcher's
    record (timing, memory, retries). ``text`` and ``content_type`` come from
    :class:`~crawlherd.content_type.HasBody`.
    """

    url: str
    success: bool
    status_code: int | None = None
    error_message: str | None = None
    error_type: str | None = None
    final_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    encoding: str = "utf-8"
    elapsed: float = 0.0
    redirects: tuple[str, ...] = ()
    depth: int = 0
    links: list[str] = field(default_factory=list)
    screenshot: bytes | None = None
    request: Request | None = None
    dispatch: DispatchInfo | None = None

    def to_dict(self, *, body: bool = False) -> dict[str, Any]:
        """A JSON-safe dict (the body only when asked for, as text)."""
        out: dict[str, Any] = {
            "url": self.url,
            "success": self.success,
            "status_code": self.status_code,
            "final_url": self.final_url,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "content_type": self.content_type or None,
            "size": len(self.body),
            "elapsed": round(self.elapsed, 6),
            "depth": self.depth,
            "redirects": list(self.redirects),
        }
        if self.links:
            out["links"] = len(self.links)
        if self.dispatch is not None:
            out["dispatch"] = self.dispatch.to_dict()
        if body:
            out["text"] = self.text
        return out

    def __repr__(self) -> str:
        state = self.status_code if self.success else f"failed: {self.error_message}"
        return f"<CrawlResult {self.url} {state}>"
