"""``crawlherd.contrib.aws_lambda.handler``: one dispatch cycle per invocation of a serverless function.

Set the function's handler to ``crawlherd.contrib.aws_lambda.handler``, trigger it on a schedule (an
EventBridge rule, ``rate(1 minute)``), and configure it with the usual settings in its environment:
``CRAWLHERD_DATABASE_URL`` (PostgreSQL the function can reach) and ``CRAWLHERD_BROKER_URL`` (``sqs://...``
with the function's role as credentials, or any other broker). The event is not read.

The cycle stops between batches ``CRAWLHERD_LAMBDA_MARGIN`` seconds (default 10) before the function's
deadline (``context.get_remaining_time_in_millis()``), so the invocation returns instead of being killed
mid-batch; what is left is dispatched by the next invocation.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from crawlherd.contrib.cycle import run_dispatch_cycle
from crawlherd.errors import ConfigurationError

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


def handler(event: Any, context: LambdaContext | None) -> dict[str, Any]:
    """Run one dispatch cycle within the invocation's deadline; returns what it did (JSON-able)."""
    deadline = None
    if context is not None:
        deadline = context.get_remaining_time_in_millis() / 1000 - _margin()
    return run_dispatch_cycle(deadline=deadline).as_dict()
