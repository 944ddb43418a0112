"""``crawlherd.contrib.aws_lambda.handler``: one dispatch cycle per invocation of a serverless function.

Set the function's handler to ``crawlherd.contrib.aws_lambda.handler``, trigger it on a schedule (an
EventBridge rule, ``rate(1 minute)``), and configure it with the usual settings in its environment:
``CRAWLHERD_DATABASE_URL`` (PostgreSQL the function can reach) and ``CRAWLHERD_BROKER_URL`` (``sqs://...``
with the function's role as credentials, or any other broker). The event is not read.

The cycle must end ``CRAWLHERD_LAMBDA_MARGIN`` seconds (default 10) before the function's deadline
(``context.get_remaining_time_in_millis()``), so the invocation returns instead of being killed: no
batch and no relay round starts too late to finish in that time, and a relay round in flight has a
deadline of its own inside it (:func:`crawlherd.contrib.cycle.cycle_timing`). What is left is
dispatched by the next invocation.

A warm container keeps its event loop, its config DB engine (with its pool of connections) and its
broker client between invocations (:class:`_Warm`); they are made again when the settings name another
database or broker, and after an invocation that failed (a broken connection is not carried over).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import Broker, open_broker
from crawlherd.contrib.cycle import CycleResult, dispatch_cycle
from crawlherd.db import create_engine
from crawlherd.errors import ConfigurationError
from crawlherd.settings import Settings, load_settings

__all__ = ["handler"]

DEFAULT_MARGIN = 10.0


class LambdaContext(Protocol):
    """The part of AWS Lambda's context object the handler reads."""

    def get_remaining_time_in_millis(self) -> int: ...


def _margin() -> float:
    raw = os.environ.get("CRAWLHERD_LAMBDA_MARGIN", "")
    try:
        margin = float(raw) if raw else DEFAULT_MARGIN
    except ValueError:
        raise ConfigurationError(f"CRAWLHERD_LAMBDA_MARGIN={raw!r} is not a number of seconds") from None
    if margin < 0:
        raise ConfigurationError(f"CRAWLHERD_LAMBDA_MARGIN={raw!r}: must be >= 0")
    return margin


class _Warm:
    """What a warm container keeps between invocations: one event loop, and the engine and broker client
    opened in it for the settings' database and broker (``key``)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.key: tuple[str, str] | None = None
        self.engine: AsyncEngine | None = None
        self.broker: Broker | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    def event_loop(self) -> asyncio.AbstractEventLoop:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        return self.loop

    async def resources(self, settings: Settings) -> tuple[AsyncEngine, Broker]:
        key = (settings.database_url, settings.effective_broker_url)
        if self.key != key or self.engine is None or self.broker is None:
            await self.close()
            stack = contextlib.AsyncExitStack()
            engine = create_engine(settings.database_url)
            stack.push_async_callback(engine.dispose)
            try:
                self.broker = await stack.enter_async_context(open_broker(settings.effective_broker_url))
            except BaseException:
                await stack.aclose()
                raise
            self.engine, self._stack, self.key = engine, stack, key
        return self.engine, self.broker

    async def close(self) -> None:
        stack, self._stack = self._stack, None
        self.engine = self.broker = None
        self.key = None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    def shutdown(self) -> None:
        """Close what is kept, and the loop (a container going away; tests)."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.run_until_complete(self.close())
            self.loop.close()
        self.loop = None

    async def cycle(self, settings: Settings, deadline: float | None) -> CycleResult:
        engine, broker = await self.resources(settings)
        try:
            return await dispatch_cycle(settings, deadline=deadline, engine=engine, broker=broker)
        except BaseException:
            await self.close()
            raise


_WARM = _Warm()


def handler(event: Any, context: LambdaContext | None) -> dict[str, Any]:
    """Run one dispatch cycle within the invocation's deadline; returns what it did (JSON-able)."""
    deadline = None
    if context is not None:
        deadline = context.get_remaining_time_in_millis() / 1000 - _margin()
    settings = load_settings()
    return _WARM.event_loop().run_until_complete(_WARM.cycle(settings, deadline)).as_dict()
