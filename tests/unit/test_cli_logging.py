"""The CLI's log handler: a connection returned by a cancelled task is one line, not a traceback."""

from __future__ import annotations

import asyncio
import io
import logging
import sys

from crawlherd.cli import _cancelled_pool_reset


def _emit(exc: BaseException, root_level: int) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_cancelled_pool_reset)
    logger = logging.getLogger("sqlalchemy.pool.impl.AsyncAdaptedQueuePool")
    root = logging.getLogger()
    old_level, old_propagate = root.level, logger.propagate
    root.setLevel(root_level)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise exc
        except BaseException:
            logger.error("Exception during reset or similar", exc_info=sys.exc_info())
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate
        root.setLevel(old_level)
    return out.getvalue()


def test_a_cancelled_reset_is_one_info_line() -> None:
    text = _emit(asyncio.CancelledError(), logging.INFO)
    assert "Traceback" not in text and text.startswith("INFO ") and "dropped" in text
    assert _emit(asyncio.CancelledError(), logging.WARNING) == ""  # below the level asked for: nothing


def test_any_other_pool_error_keeps_its_traceback() -> None:
    text = _emit(RuntimeError("boom"), logging.WARNING)
    assert text.startswith("ERROR ") and "Traceback" in text and "boom" in text
