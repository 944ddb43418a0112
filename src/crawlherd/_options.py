"""Options declared once: a component's options are dataclass fields whose types carry their bounds
(:data:`Count`, :data:`Seconds`, :data:`Delay`, :data:`AtLeast0`) or their choices (``Literal[...]``),
and :func:`check_options` checks them all, with one wording for every component::

    @dataclass(frozen=True)
    class RelayOptions:
        relay_batch: Count = 1000
        lease: Seconds = 60.0

    check_options(options, "relay")  # ConfigurationError: relay option lease=0: must be > 0 seconds

A bound applies to a value that is not None (``Seconds | None`` is "None or > 0")."""
# The URL-options coercer (crawlherd._urloptions) reads the same fields without their bounds.

from __future__ import annotations

import dataclasses
import math
from functools import cache
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from annotated_types import Ge, Gt

from crawlherd.errors import ConfigurationError

__all__ = ["AtLeast0", "Count", "Delay", "Seconds", "check_options"]

#: An integer >= 1 (a batch, a concurrency, a number of attempts).
Count = Annotated[int, Ge(1)]
#: An integer >= 0.
AtLeast0 = Annotated[int, Ge(0)]
#: A finite number of seconds > 0 (a timeout, a lease, an interval).
Seconds = Annotated[float, Gt(0)]
#: A finite number of seconds >= 0 (a delay, a back-off).
Delay = Annotated[float, Ge(0)]


@cache
def _rules(cls: type) -> tuple[tuple[str, Any, tuple[Any, ...]], ...]:
    """(field, kind, arguments) of every checked field of the dataclass ``cls``: kind ``Gt`` / ``Ge``
    with (limit, integer?), or ``Literal`` with its values."""
    hints = get_type_hints(cls, include_extras=True)
    out: list[tuple[str, Any, tuple[Any, ...]]] = []
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        for arg in (hint, *get_args(hint)):  # the field's type, or a member of its union with None
            if get_origin(arg) is Literal:
                out.append((f.name, Literal, get_args(arg)))
            elif get_origin(arg) is Annotated:
                base, *meta = get_args(arg)
                out.extend((f.name, Gt, (m.gt, base is int)) for m in meta if isinstance(m, Gt))
                out.extend((f.name, Ge, (m.ge, base is int)) for m in meta if isinstance(m, Ge))
    return tuple(out)


def _wrong(value: Any, kind: Any, args: tuple[Any, ...]) -> str | None:
    """What is wrong with ``value`` under the rule ``kind`` / ``args`` (None: nothing)."""
    if kind is Literal:
        return None if value in args else f"use {' or '.join(map(repr, args))}"
    limit, integer = args
    op = ">" if kind is Gt else ">="
    if integer:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= limit
        return None if ok else f"must be an integer {op} {limit:g}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "must be a finite number of seconds"
    ok = value > limit if kind is Gt else value >= limit
    return None if ok else f"must be {op} {limit:g} seconds"


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
