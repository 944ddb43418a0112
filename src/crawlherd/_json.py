"""JSON on the hot paths -- the frontiers' request records, the config DB's JSON columns: orjson (several
times the standard library's speed at reading and writing them), with the standard library's answer
wherever orjson refuses what :mod:`json` accepts (integers beyond 64 bits, lone surrogates, ``NaN``
literals in records written before), so that what is written and read back stays the same. One
difference: a ``NaN`` or infinite float is written as ``null`` (JSON has no such number; the standard
library wrote a ``NaN`` that no other JSON reader takes)."""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]

_OPTIONS = orjson.OPT_NON_STR_KEYS  # int, float, bool and None keys as json writes them
_SORTED = _OPTIONS | orjson.OPT_SORT_KEYS


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """``value`` as compact JSON text (UTF-8, not escaped to ASCII)."""
    try:
        return orjson.dumps(value, option=_SORTED if sort_keys else _OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError: a value orjson does not write; json says what it can
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)


def loads(data: str | bytes) -> Any:
    """The value of JSON text ``data``."""
    try:
        return orjson.loads(data)
    except ValueError:  # orjson.JSONDecodeError (a json.JSONDecodeError): json reads a little more
        return json.loads(data)
