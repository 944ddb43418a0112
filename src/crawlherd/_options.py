"""Options declared once: a component's options are dataclass fields whose types carry their bounds
(:data:`Count`, :data:`Seconds`, :data:`Delay`, :data:`AtLeast0`, :data:`Fraction`) or their choices (``Literal[...]``),
and :func:`check_options` checks them all, with one wording for every component::

    @dataclass(frozen=True)
    class RelayOptions:
        relay_batch: Count = 1000
        lease: Seconds = 60.0

    check_options(options, "relay")  # ConfigurationError: relay option lease=0: must be > 0 seconds

A bound applies to a value that is not None (``Seconds | None`` is "None or > 0"). A class may name
pairs of its options in ``shorter_than`` (a ClassVar): ``("block", "socket_timeout")`` -- when both are
set (not 0 or None), the first must be shorter than the second."""
# The URL-options coercer (crawlherd._urloptions) reads the same fields without their bounds.

from __future__ import annotations

import dataclasses
import math
import operator
from functools import cache
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen

from crawlherd.errors import ConfigurationError

__all__ = ["AtLeast0", "Count", "Delay", "Fraction", "NonEmpty", "Seconds", "check_options"]

#: An integer >= 1 (a batch, a concurrency, a number of attempts).
Count = Annotated[int, Ge(1)]
#: An integer >= 0.
AtLeast0 = Annotated[int, Ge(0)]
#: A finite number of seconds > 0 (a timeout, a lease, an interval).
Seconds = Annotated[float, Gt(0)]
#: A finite number of seconds >= 0 (a delay, a back-off).
Delay = Annotated[float, Ge(0)]
#: A number strictly between 0 and 1 (a probability, an error rate): no unit.
Fraction = Annotated[float, Gt(0), Lt(1), "no unit"]
#: A string that is not empty (a name).
NonEmpty = Annotated[str, MinLen(1)]


@cache
def _rules(cls: type) -> tuple[tuple[str, Any, tuple[Any, ...]], ...]:
    """(field, kind, arguments) of every checked field of the dataclass ``cls``: ``Literal`` with its
    values, ``Annotated`` with (integer?, its ``Gt`` / ``Ge`` / ``Le`` / ``Lt`` bounds, the unit of a
    number: seconds unless marked ``"no unit"``), or ``len`` with the
    (``MinLen``, ``MaxLen``) of a string."""
    hints = get_type_hints(cls, include_extras=True)
    out: list[tuple[str, Any, tuple[Any, ...]]] = []
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        for arg in (hint, *get_args(hint)):  # the field's type, or a member of its union with None
            if get_origin(arg) is Literal:
                out.append((f.name, Literal, get_args(arg)))
            elif get_origin(arg) is Annotated:
                base, *meta = get_args(arg)
                bounds = tuple(_bound(m) for m in meta if isinstance(m, Gt | Ge | Le | Lt))
                if bounds:
                    unit = "" if "no unit" in meta else " seconds"
                    out.append((f.name, Annotated, (base is int, bounds, unit)))
                lengths = [m for m in meta if isinstance(m, MinLen | MaxLen)]
                if lengths:
                    low = max((m.min_length for m in lengths if isinstance(m, MinLen)), default=0)
                    high = min((m.max_length for m in lengths if isinstance(m, MaxLen)), default=None)
                    out.append((f.name, len, (low, high)))
    return tuple(out)


def _bound(m: Gt | Ge | Le | Lt) -> tuple[str, float]:
    """(">", ">=", "<=" or "<", limit) of an ``annotated_types`` bound."""
    if isinstance(m, Gt):
        return ">", float(m.gt)  # type: ignore[arg-type]
    if isinstance(m, Ge):
        return ">=", float(m.ge)  # type: ignore[arg-type]
    if isinstance(m, Lt):
        return "<", float(m.lt)  # type: ignore[arg-type]
    return "<=", float(m.le)  # type: ignore[arg-type]


def _wrong(value: Any, kind: Any, args: tuple[Any, ...]) -> str | None:
    """What is wrong with ``value`` under the rule ``kind`` / ``args`` (None: nothing)."""
    if kind is Literal:
        return None if value in args else f"use {' or '.join(map(repr, args))}"
    if kind is len:
        low, high = args
        if isinstance(value, str) and low <= len(value) and (high is None or len(value) <= high):
            return None
        return f"must be {low} to {high} characters" if high is not None else "must not be empty"
    integer, bounds, unit = args
    words = " and ".join(f"{op} {limit:g}" for op, limit in bounds)
    wanted = f"must be an integer {words}" if integer else f"must be {words}{unit}"
    if isinstance(value, bool) or not isinstance(value, int if integer else int | float) or not math.isfinite(value):
        return wanted
    ok = all(_OPS[op](value, limit) for op, limit in bounds)
    return None if ok else wanted


_OPS = {">": operator.gt, ">=": operator.ge, "<=": operator.le, "<": operator.lt}


def check_options(options: Any, label: str) -> None:
    """Raise ConfigurationError naming the first field of the dataclass instance ``options`` that is
    out of its declared bounds (``label`` names the component in the message)."""
    cls: type = type(options)
    for name, kind, args in _rules(cls):
        value = getattr(options, name)
        if value is None:
            continue
        problem = _wrong(value, kind, args)
        if problem:
            raise ConfigurationError(f"{label} option {name}={value!r}: {problem}")
    for short, long in getattr(cls, "shorter_than", ()):
        a, b = getattr(options, short), getattr(options, long)
        if a and b and not a < b:
            raise ConfigurationError(f"{label} option {short}={a!r} must be shorter than {long}={b!r}")
