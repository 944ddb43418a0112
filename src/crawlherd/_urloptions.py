"""Options of a backend chosen by URL, from the URL's query string and keywords, typed and checked once.

Every frontier and broker takes its options both ways -- ``open_scheduler("redis://h/0?prefix=crawl&
delay=1.5")``, ``open_broker("sqlite:///x.db", max_deliveries=3)`` -- and keywords win over the query
string. :func:`url_options` merges the two, refuses a name the backend does not know (the message lists
the ones it knows) and converts each value that came as text to the option's type:

- ``str``, ``int``, ``float``; ``bool`` from ``1/true/yes/on`` or ``0/false/no/off``;
- ``Literal[...]``: one of its values (the message lists them; checked for keywords too);
- ``X | None``: an empty value is None, anything else is read as ``X``.

An option of any other type (a clock, a live client, a mapping) can only be given as a keyword: in the
URL it is refused. Range checks (``delay >= 0``) stay with the options' class, which knows why.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import fields
from typing import Any, Literal, TypeVar, Union
from urllib.parse import parse_qsl, urlsplit

from crawlherd.errors import ConfigurationError

__all__ = ["option_types", "options_from_url", "url_options"]

T = TypeVar("T")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_TEXT_TYPES: tuple[type, ...] = (str, int, float, bool)


_TYPES: dict[type, dict[str, Any]] = {}


def option_types(cls: type) -> dict[str, Any]:
    """The fields of the dataclass ``cls`` with their types (annotations resolved)."""
    found = _TYPES.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _TYPES[cls] = {f.name: hints[f.name] for f in fields(cls)}
    return found


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
    if typing.get_origin(kind) is Literal:
        return True
    inner = _optional(kind)
    if inner is not None:
        return _from_text(inner)
    return kind in _TEXT_TYPES


def _optional(kind: Any) -> Any:
    """X for ``X | None``, else None."""
    if typing.get_origin(kind) in (Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0]
    return None


def _coerce(value: Any, kind: Any, *, what: str, name: str) -> Any:
    if typing.get_origin(kind) is Literal:
        allowed = typing.get_args(kind)
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
