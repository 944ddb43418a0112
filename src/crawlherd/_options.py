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
set (not 0 or None), the first must be shorter than the second.

The same dataclasses are read from a backend's URL. Every frontier and broker takes its options both
ways -- ``open_scheduler("redis://h/0?prefix=crawl&delay=1.5")``, ``open_broker("sqlite:///x.db",
max_deliveries=3)`` -- and keywords win over the query string. :func:`url_options` merges the two,
refuses a name the backend does not know (the message lists the ones it knows) and converts each value
that came as text to the option's type:

- ``str``, ``int``, ``float``; ``bool`` from ``1/true/yes/on`` or ``0/false/no/off``;
- ``Literal[...]``: one of its values (the message lists them; checked for keywords too);
- ``X | None``: an empty value is None, anything else is read as ``X``.

An option of any other type (a clock, a live client, a mapping) can only be given as a keyword: in the
URL it is refused. The URL reader converts types only; the bounds are :func:`check_options`' job.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import types
from collections.abc import Collection, Mapping
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints
from urllib.parse import parse_qsl, urlsplit

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen

from crawlherd.errors import ConfigurationError

__all__ = [
    "AtLeast0",
    "Count",
    "Delay",
    "Fraction",
    "NonEmpty",
    "Seconds",
    "check_options",
    "option_types",
    "options_from_url",
    "url_options",
]

T = TypeVar("T")

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


# Options read from a backend URL

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_TEXT_TYPES: tuple[type, ...] = (str, int, float, bool)


def option_types(cls: type) -> dict[str, Any]:
    """The fields of the dataclass ``cls`` with their types (annotations resolved, bounds left out)."""
    return _types(cls)


@cache
def _types(cls: type) -> dict[str, Any]:
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def url_options(
    url: str,
    options: Mapping[str, Any],
    known: Mapping[str, Any],
    *,
    what: str,
    keyword_only: Collection[str] = (),
) -> dict[str, Any]:
    """The options of ``url``'s query string and ``options`` (which win), each name one of ``known``
    (name -> type) and each value converted to its type. ``what`` names the owner in messages
    (``"frontier"``, ``"redis broker"``); ``keyword_only`` names options refused in the URL besides
    those whose type cannot be read from text."""
    merged: dict[str, Any] = {}
    for name, text in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        kind = known.get(name)
        if kind is not None and (name in keyword_only or not _from_text(kind)):
            raise ConfigurationError(f"{what} option {name!r} cannot be given in the URL; pass it as a keyword")
        merged[name] = text
    merged.update(options)
    out: dict[str, Any] = {}
    for name, value in merged.items():
        if name not in known:
            raise ConfigurationError(f"unknown {what} option {name!r}; known options: {', '.join(sorted(known))}")
        out[name] = _coerce(value, known[name], what=what, name=name)
    return out


def options_from_url(
    cls: type[T], url: str, options: Mapping[str, Any], *, what: str, keyword_only: Collection[str] = ()
) -> T:
    """An instance of the options dataclass ``cls`` from ``url`` and ``options`` (see :func:`url_options`)."""
    values = url_options(url, options, option_types(cls), what=what, keyword_only=keyword_only)
    return cls(**values)


def _from_text(kind: Any) -> bool:
    """Can a value of type ``kind`` be read from a URL's text?"""
    if get_origin(kind) is Literal:
        return True
    inner = _optional(kind)
    if inner is not None:
        return _from_text(inner)
    return kind in _TEXT_TYPES


def _optional(kind: Any) -> Any:
    """X for ``X | None``, else None."""
    if get_origin(kind) in (Union, types.UnionType):
        args = [a for a in get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(get_args(kind)) == 2:
            return args[0]
    return None


def _coerce(value: Any, kind: Any, *, what: str, name: str) -> Any:
    if get_origin(kind) is Literal:
        allowed = get_args(kind)
        if value not in allowed:
            choices = " or ".join(repr(a) for a in allowed)
            raise ConfigurationError(f"{what} option {name}={value!r}: use {choices}")
        return value
    if not isinstance(value, str):
        return value
    inner = _optional(kind)
    if inner is not None:
        return None if value == "" else _coerce(value, inner, what=what, name=name)
    if kind is str or kind not in _TEXT_TYPES:
        return value
    try:
        if kind is bool:
            lowered = value.strip().lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError(value)
        return kind(value)
    except ValueError:
        hint = f" (use {'/'.join(_TRUE)} or {'/'.join(_FALSE)})" if kind is bool else ""
        article = "an" if kind is int else "a"
        raise ConfigurationError(f"{what} option {name}={value!r} is not {article} {kind.__name__}{hint}") from None
