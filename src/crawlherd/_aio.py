"""asyncio helpers the whole package shares."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has finished. Its own ``CancelledError`` is
    absorbed; the caller's is not: when the caller is being cancelled while it waits, that
    cancellation goes on (``suppress(CancelledError)`` around the await would swallow it)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
