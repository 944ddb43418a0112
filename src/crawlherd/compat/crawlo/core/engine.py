"""The part of Crawlo's engine (``crawlo.core.engine``) that belongs to the scheduler: whether enqueues
are waiting for room, which means the crawl is not finished even when every queue is empty."""

from __future__ import annotations

from typing import Any

__all__ = ["has_pending_enqueues"]


def has_pending_enqueues(scheduler: Any) -> bool:
    """True while ``scheduler`` has enqueues blocked on a full queue."""
    return scheduler is not None and int(getattr(scheduler, "pending_enqueue_count", 0) or 0) > 0
