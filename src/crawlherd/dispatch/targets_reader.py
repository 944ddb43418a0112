"""Reading a targets document (TOML or YAML) within limits, with the line of each key -- no checking
of what it says (that is :mod:`crawlherd.dispatch.targets_file`'s job).

A hostile document is refused with a clear problem, in bounded time and memory: over a size, nested
too deep, or (YAML) with aliases that expand too far ("billion laughs"). The YAML is parsed once: its
node graph gives both the lines and the data.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import yaml

from crawlherd.errors import TargetsFileError

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_YAML_NODES", "Lines", "read_document", "too_large", "where"]

#: The line of each key path of a document (1-based): ``("targets", 0, "cron") -> 12``.
Lines = dict[tuple[Any, ...], int]

#: The largest targets file read (bytes). A targets file of thousands of targets is well under 1 MiB.
MAX_FILE_BYTES = 8 * 1024 * 1024
#: The deepest nesting of mappings and lists a targets file may have (a real one needs about 6).
MAX_DEPTH = 64
#: How many nodes a YAML document may expand to once its aliases are followed (billion laughs).
MAX_YAML_NODES = 200_000


def read_document(
    text: str,
    *,
    path: str,
    fmt: Literal["toml", "yaml"],
    max_bytes: int = MAX_FILE_BYTES,
    max_depth: int = MAX_DEPTH,
    max_yaml_nodes: int = MAX_YAML_NODES,
) -> tuple[dict[str, Any], Lines]:
    """The mapping at the top of the document ``text`` (empty for an empty document) and the line of
    each key path; a document that cannot be read or is over a limit raises :class:`TargetsFileError`
    (``path`` names the file) with its one problem."""
    if len(text) > max_bytes:
        raise TargetsFileError(path, [("(file)", too_large(len(text), max_bytes))])
    try:
        if fmt == "toml":
            data: Any = tomllib.loads(text)
            if not _depth(data, max_depth):
                raise Refused(f"nested deeper than {max_depth} levels")
            lines = _toml_lines(text)
        else:
            data, lines = _load_yaml(text, max_depth=max_depth, max_nodes=max_yaml_nodes)
    except Refused as exc:
        raise TargetsFileError(path, [("(file)", f"refused: {exc}")]) from None
    except RecursionError:
        # tomllib recurses once per nested array or inline table: a deep one runs out of stack.
        raise TargetsFileError(path, [("(file)", f"refused: nested deeper than {max_depth} levels")]) from None
    except tomllib.TOMLDecodeError as exc:
        raise TargetsFileError(path, [_toml_error(exc)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}" if mark is not None else "(file)"
        raise TargetsFileError(path, [(at, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TargetsFileError(path, [("(file)", "the file must hold 'websites' and 'targets' lists")])
    return data, lines


_FLOW_BRACKETS = re.compile(r"[\[\]{}]")


class Refused(Exception):
    """A document over one of the limits; ``str()`` is the message for the user."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses documents nested deeper than ``max_depth`` while composing
    (PyYAML's composer recurses once per level: 100,000 levels would end in a RecursionError)."""

    max_depth = MAX_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise Refused(f"line {mark.line + 1}: nested deeper than {self.max_depth} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_expansion(root: yaml.Node, max_nodes: int) -> None:
    """Refuse a YAML graph whose aliases expand to more than ``max_nodes`` nodes. Each distinct node
    is counted once (memoised), so this costs the size of the file, not of its expansion."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
        if sizes[id(node)] > max_nodes:
            raise Refused(
                f"line {node.start_mark.line + 1}: its aliases expand to more than {max_nodes:,} values "
                "(a 'billion laughs' document?); write the entries out instead of nesting aliases"
            )


def _load_yaml(text: str, *, max_depth: int, max_nodes: int) -> tuple[Any, Lines]:
    """Parse YAML once: compose the node graph (depth-limited), check how far its aliases expand,
    map each key path to its line, then build the Python data from the same graph."""
    # PyYAML's scanner keeps a pending "simple key" per open flow bracket and scans them all on every
    # token: refuse a deep ``[[[[...`` before it starts (brackets in quoted strings count too -- a
    # real targets file has nowhere near ``max_depth`` of them open at once).
    depth = 0
    for bracket in _FLOW_BRACKETS.findall(text):
        depth += 1 if bracket in "[{" else -1
        if depth > max_depth:
            raise Refused(f"nested deeper than {max_depth} levels ('[' and '{{' opened {depth} deep)")
    loader = BoundedLoader(text)
    loader.max_depth = max_depth
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}
        _check_expansion(root, max_nodes)
        lines = _yaml_lines(root)
        return loader.construct_document(root), lines
    finally:
        loader.dispose()


def _yaml_lines(root: yaml.Node) -> Lines:
    """Map each key path of a YAML document to its (1-based) line. A node reached again through an
    alias is not walked again: its paths are those of its anchor."""
    lines: Lines = {}
    walked: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        lines.setdefault(path, node.start_mark.line + 1)
        if id(node) in walked:
            continue
        walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                lines[(*path, name)] = key.start_mark.line + 1
                stack.append((value, (*path, name)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                stack.append((item, (*path, index)))
    return lines


def _depth(data: Any, limit: int) -> bool:
    """True when ``data`` (parsed TOML) nests at most ``limit`` levels (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return True


_TOML_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-]+)\s*\]\]?")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")


def _toml_lines(text: str) -> Lines:
    """Map each key path of a targets file in TOML to its (1-based) line: ``[[websites]]`` and
    ``[[targets]]`` entries, their sub-tables (``[websites.politeness]``) and ``key =`` lines.
    (tomllib keeps no positions; a targets file uses only these shapes.)"""
    lines: Lines = {}
    counts: dict[str, int] = {}
    table: tuple[Any, ...] = ()
    in_multiline = 0  # open brackets of a value spanning lines
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
        if in_multiline:
            in_multiline += line.count("[") - line.count("]")
            continue
        header = _TOML_HEADER.match(line)
        if header and not _TOML_KEY.match(line):
            parts = header.group(2).split(".")
            if header.group(1) == "[[" and len(parts) == 1:
                index = counts.get(parts[0], -1) + 1
                counts[parts[0]] = index
                table = (parts[0], index)
            elif parts[0] in counts:
                table = (parts[0], counts[parts[0]], *parts[1:])
            else:
                table = tuple(parts)
            lines.setdefault(table, number)
            continue
        key = _TOML_KEY.match(line)
        if key:
            lines.setdefault((*table, key.group(1).strip('"')), number)
            value = line[key.end() :]
            in_multiline = max(0, value.count("[") - value.count("]"))
    return lines


def where(path: Sequence[Any], lines: Mapping[tuple[Any, ...], int]) -> str:
    """``path`` as the user reads it, with the line of its nearest key that has one:
    ``("targets", 0, "cron")`` -> ``"line 12, targets[0].cron"``."""
    key = ""
    for part in path:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    key = key or "(file)"
    for cut in range(len(path), -1, -1):
        line = lines.get(tuple(path[:cut]))
        if line is not None and (cut or not path):
            return f"line {line}, {key}"
    return key


def _toml_error(exc: tomllib.TOMLDecodeError) -> tuple[str, str]:
    """tomllib's "Expected ... (at line 3, column 7)" as ("line 3", "not valid TOML: Expected ...")."""
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(exc))
    if found is None:
        return "(file)", f"not valid TOML: {exc}"
    return f"line {found.group(1)}", f"not valid TOML: {str(exc)[: found.start()]} (column {found.group(2)})"


def too_large(size: int, limit: int) -> str:
    """The problem of a file of ``size`` bytes over the ``limit``."""
    return (
        f"the file is {size / 1_048_576:.1f} MiB, over the {limit / 1_048_576:.1f} MiB limit for a targets file; "
        "split it into several files (each import adds to the database)"
    )
