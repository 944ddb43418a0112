"""Durations as people write them: ``"90s"``, ``"15m"``, ``"1h30m"``, ``"2d"``, ``"250ms"`` or a
number of seconds. Used by schedules, politeness and retention settings alike."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from crawlherd.errors import ScheduleError

__all__ = ["duration_seconds", "format_duration", "parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.I)
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: The longest duration taken, in seconds (about 3,000 years; timedelta's own limit is near 10**14 s).
_LONGEST = 10.0**11


def format_duration(seconds: float) -> str:
    """``21600`` -> ``"6h"``, ``5400`` -> ``"1h30m"``, ``0.25`` -> ``"250ms"``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    parts, rest = [], seconds
    for unit in ("w", "d", "h", "m"):
        count, rest = divmod(rest, _UNIT[unit])
        if count:
            parts.append(f"{int(count)}{unit}")
    if rest:
        parts.append(f"{rest:g}s")
    return "".join(parts)


def parse_duration(value: str | float | int) -> timedelta:
    """``"90s"``, ``"15m"``, ``"1h30m"``, ``"2d"``, ``"250ms"`` or a number of seconds."""
    if isinstance(value, bool):
        raise ScheduleError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ScheduleError(f"duration must be >= 0, got {value!r}")
        if not value <= _LONGEST:  # inf and nan too
            raise ScheduleError(f"duration too long: {value!r} seconds (at most {_LONGEST:g})")
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ScheduleError(f"not a duration: {value!r} (use e.g. '90s', '15m', '1h30m', '2d' or seconds)")
    text = value.strip().replace(" ", "")
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match[1]) * _UNIT[match[2].lower()]
        pos = match.end()
    if pos != len(text) or not text:
        raise ScheduleError(f"not a duration: {value!r} (use e.g. '90s', '15m', '1h30m', '2d')")
    if total > _LONGEST:
        raise ScheduleError(f"duration too long: {value!r} (at most {_LONGEST:g} seconds)")
    return timedelta(seconds=total)


def duration_seconds(value: Any) -> Any:
    """A duration (as :func:`parse_duration` takes it) -> seconds, for a pydantic ``mode="before"``
    validator: a bad one is a ``ValueError`` (a validation error); anything else is left to pydantic's
    own type check."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return value
    try:
        return parse_duration(value).total_seconds()
    except ScheduleError as exc:
        raise ValueError(str(exc)) from None
