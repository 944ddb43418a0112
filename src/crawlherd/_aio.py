"""asyncio helpers the whole package shares."""

from __future__ import annotations

import asyncio
from typing import Any, Self

__all__ = ["AsyncClosing", "cancel_and_wait"]


class AsyncClosing:
    """``async with obj:`` closes ``obj`` on the way out (``await obj.close()``). Entering does nothing
    more here; a class that opens something on entry overrides ``__aenter__``."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        raise NotImplementedError


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
