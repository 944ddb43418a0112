"""The Redis backends' Lua lives in ``.lua`` files read with importlib.resources: every script the
frontier and the broker register is composed of fragments that exist, in the order given."""

from __future__ import annotations

import pytest

from crawlherd._lua import lua_script
from crawlherd.brokers.redis import _SCRIPTS as BROKER_SCRIPTS
from crawlherd.frontier.redis import _SCRIPTS as FRONTIER_SCRIPTS


@pytest.mark.parametrize(
    ("package", "parts"),
    [("crawlherd.frontier", parts) for parts in FRONTIER_SCRIPTS.values()]
    + [("crawlherd.brokers", parts) for parts in BROKER_SCRIPTS.values()],
)
def test_every_script_is_its_fragments_in_order(package: str, parts: tuple[str, ...]) -> None:
    source = lua_script(package, *parts)
    marks = [source.index(f"-- {name}.lua\n") for name in parts]
    assert marks == sorted(marks) and marks[0] == 0
    assert "local function take()" in source if "take" in parts else "take()" not in source


def test_a_missing_fragment_is_an_error() -> None:
    with pytest.raises(FileNotFoundError):
        lua_script("crawlherd.frontier", "prelude", "no_such_script")
    with pytest.raises(ValueError, match="at least one"):
        lua_script("crawlherd.frontier")
