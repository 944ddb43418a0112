"""Crawlo's queue errors (``crawlo.queue.exceptions``)."""

from __future__ import annotations

from crawlherd.errors import QueueFullError as _FrontierFull

__all__ = ["QueueClosedError", "QueueEmptyError", "QueueFullError", "QueueFullTimeout"]


class QueueFullError(_FrontierFull):
    """The queue holds its maximum."""

    def __init__(self, queue_name: str = "", size: int = 0) -> None:
        super().__init__(f"Queue '{queue_name}' is full (size: {size})")
        self.queue_name = queue_name
        self.size = size


class QueueFullTimeout(_FrontierFull):
    """The queue stayed full for the whole time an enqueue was allowed to wait."""

    def __init__(
        self, queue_name: str = "", waited_seconds: float = 0.0, queue_size: int = 0, max_size: int = 0
    ) -> None:
        self.queue_name = queue_name
        self.waited_seconds = waited_seconds
        self.queue_size = queue_size
        self.max_size = max_size
        super().__init__(
            f"Queue '{queue_name}' full and wait timed out after {waited_seconds:.1f}s (size={queue_size}/{max_size})"
        )


class QueueEmptyError(Exception):
    """The queue has nothing to give."""

    def __init__(self, queue_name: str = "") -> None:
        super().__init__(f"Queue '{queue_name}' is empty")
        self.queue_name = queue_name


class QueueClosedError(Exception):
    """The queue was closed."""
