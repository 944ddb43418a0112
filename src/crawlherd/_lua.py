"""Lua scripts kept as ``.lua`` files beside the module that runs them (``<package>/lua/<name>.lua``),
read with :mod:`importlib.resources` so that they ship in the wheel and can be read, linted and diffed.

A script made of fragments names them in order: ``lua_script("crawlherd.frontier", "prelude",
"lease")`` is ``prelude.lua`` followed by ``lease.lua``; a fragment defines locals that the files after
it use. Each fragment starts with a ``-- <name>.lua`` line, so the composed source shows where each part comes from.
"""

from __future__ import annotations

import functools
from importlib.resources import files

__all__ = ["lua_script"]


@functools.cache
def _fragment(package: str, name: str) -> str:
    text = files(package).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    return f"-- {name}.lua\n{text}"


def lua_script(package: str, *names: str) -> str:
    """The source of a script: the fragments ``names`` of ``package``'s ``lua/`` folder, in order."""
    if not names:
        raise ValueError("lua_script() needs at least one fragment name")
    return "\n".join(_fragment(package, name) for name in names)
