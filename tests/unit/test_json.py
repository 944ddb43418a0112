"""crawlherd._json: orjson on the hot paths, writing what the standard library wrote and reading what it
read (the frontiers' records outlive an upgrade)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from crawlherd import _json

VALUES: list[Any] = [
    {"url": "http://a.test/é", "meta": {"n": 1, "f": 0.1, "big": 1e16, "neg": -0.0, "list": [True, None, "x"]}},
    {1: "int key", None: "none key", False: "bool key", 1.5: "float key"},  # (json cannot sort these)
    {"huge": 2**70, "tiny": -(2**65)},  # beyond orjson's 64 bits: json writes them
    {"z": {"b": 1, "a": 2}, "a": []},
    "plain",
    [],
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("sort_keys", [False, True])
def test_it_writes_what_json_wrote_and_reads_it_back(value: Any, sort_keys: bool) -> None:
    if sort_keys and isinstance(value, dict) and not all(isinstance(k, str) for k in value):
        sort_keys = False  # json refuses to sort mixed keys (sorted: a site spec, all strings)
    text = _json.dumps(value, sort_keys=sort_keys)
    assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
    assert _json.loads(text) == json.loads(text)
    assert _json.loads(text.encode()) == json.loads(text)


def test_records_written_before_with_nan_are_still_read() -> None:
    old = json.dumps({"x": math.nan, "y": math.inf})  # the standard library's NaN / Infinity literals
    read = _json.loads(old)
    assert math.isnan(read["x"]) and read["y"] == math.inf


def test_nan_is_written_as_null_and_what_json_cannot_write_is_refused_as_before() -> None:
    assert _json.dumps({"x": math.nan}) == '{"x":null}'
    with pytest.raises(TypeError):
        _json.dumps({"x": object()})
    with pytest.raises(json.JSONDecodeError):
        _json.loads("{not json")
