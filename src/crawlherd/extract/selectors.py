"""CSS selectors, the leaf of :mod:`crawlherd.extract`: parsing a page (selectolax / lexbor), checking
a selector, and :class:`FieldRule` -- how one field is read (``"css"``, ``"css@attr"``, ``"@attr"`` or a
table with ``selector``, ``attr``, ``all``, ``required``, ``absolute``). Both the extraction rules
(:mod:`.rules`) and pagination (:mod:`.pagination`) build on it; it imports neither.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser, LexborNode, SelectolaxError

from crawlherd.errors import ConfigurationError
from crawlherd.page import MAX_HTML_DEPTH, MAX_HTML_WORK, OFF_LOOP_CHARS, html_cost

__all__ = [
    "MAX_HTML_DEPTH",
    "MAX_HTML_WORK",
    "OFF_LOOP_CHARS",
    "FieldRule",
    "call_for_page",
    "check_selector",
    "html_cost",
    "parse_html",
]

T = TypeVar("T")

_ATTR = re.compile(r"^[A-Za-z_:][-A-Za-z0-9_:.]*$")
_FIELD_KEYS = frozenset({"selector", "attr", "all", "required", "absolute"})
_PROBE = LexborHTMLParser("<html><body><p></p></body></html>")


async def call_for_page(html: str, func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` -- work on the page ``html`` (parsing it) -- in a thread when the page
    is longer than :data:`OFF_LOOP_CHARS`, so that the event loop goes on; else right here."""
    if len(html) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(func, *args, **kwargs)
    return func(*args, **kwargs)


def parse_html(html: str | bytes | LexborHTMLParser) -> LexborHTMLParser:
    """A parsed tree from text, bytes (UTF-8) or an already parsed tree. Text is checked against the
    parse budget first (:func:`html_cost`): a page over it raises
    :class:`~crawlherd.errors.PageTooComplexError` instead of holding the parser for minutes."""
    if isinstance(html, LexborHTMLParser):
        return html
    if isinstance(html, bytes):
        html = html.decode("utf-8", errors="replace")
    html_cost(html)
    return LexborHTMLParser(html)


def check_selector(selector: str, *, where: str) -> str:
    """Return ``selector`` if lexbor can parse it, else raise ConfigurationError naming ``where``."""
    if not isinstance(selector, str) or not selector.strip():
        raise ConfigurationError(f"{where}: a CSS selector must be a non-empty string, got {selector!r}")
    try:
        _PROBE.css(selector)
    except SelectolaxError:
        raise ConfigurationError(f"{where}: {selector!r} is not a valid CSS selector") from None
    return selector.strip()


def _split_spec(spec: str) -> tuple[str | None, str | None]:
    """``"a.x@href"`` -> ("a.x", "href"); ``"@data-id"`` -> (None, "data-id"); ``"h2"`` -> ("h2", None).

    An ``@`` inside brackets (``a[href*="@"]``) is part of the selector, not an attribute marker.
    """
    at = spec.rfind("@")
    if at != -1:
        head, tail = spec[:at], spec[at + 1 :].strip()
        if _ATTR.match(tail) and head.count("[") == head.count("]"):
            head = head.strip()
            return (head or None), tail
    return spec.strip(), None


def _text(node: LexborNode) -> str:
    return " ".join((node.text(deep=True) or "").split())


@dataclass(frozen=True, slots=True)
class FieldRule:
    """How to read one field inside an item container (or a whole page, for detail fields).

    ``selector`` None means the container itself; ``attr`` None means the text.
    """

    name: str
    selector: str | None = None
    attr: str | None = None
    all: bool = False
    required: bool = False
    absolute: bool = False

    @classmethod
    def parse(
        cls, name: str, spec: Any, *, website: str, section: str = "fields", default_attr: str | None = None
    ) -> FieldRule:
        """Build a rule from its spec (string or table); errors name the website and the field."""
        where = f"website {website!r}: {section}.{name}"
        if isinstance(spec, str):
            selector, attr = _split_spec(spec)
            options: dict[str, Any] = {}
        elif isinstance(spec, Mapping):
            unknown = set(spec) - _FIELD_KEYS
            if unknown:
                raise ConfigurationError(
                    f"{where}: unknown key(s) {sorted(unknown)}; a field table takes {sorted(_FIELD_KEYS)}"
                )
            selector, attr = spec.get("selector"), spec.get("attr")
            options = {k: spec[k] for k in ("all", "required", "absolute") if k in spec}
            for key, value in options.items():
                if not isinstance(value, bool):
                    raise ConfigurationError(f"{where}: {key!r} must be true or false, got {value!r}")
        else:
            raise ConfigurationError(
                f'{where}: expected a selector string ("css", "css@attr", "@attr") or a table, got {spec!r}'
            )
        if selector is None and attr is None:
            raise ConfigurationError(f"{where}: give a selector, an attribute, or both")
        if selector is not None:
            selector = check_selector(selector, where=where)
        if attr is None:
            attr = default_attr
        if attr is not None and (not isinstance(attr, str) or not _ATTR.match(attr)):
            raise ConfigurationError(f"{where}: {attr!r} is not a valid attribute name")
        return cls(name=name, selector=selector, attr=attr, **options)

    def spec(self) -> str | dict[str, Any]:
        """The spec this rule was parsed from, in its shortest form."""
        if not (self.all or self.required or self.absolute):
            return f"{self.selector or ''}@{self.attr}" if self.attr else str(self.selector)
        out: dict[str, Any] = {}
        if self.selector is not None:
            out["selector"] = self.selector
        if self.attr is not None:
            out["attr"] = self.attr
        for key in ("all", "required", "absolute"):
            if getattr(self, key):
                out[key] = True
        return out

    def _value(self, node: LexborNode, page_url: str) -> str | None:
        if self.attr is None:
            value: str | None = _text(node)
        else:
            raw = node.attributes.get(self.attr)
            value = raw.strip() if raw is not None else None
        if value is not None and self.absolute:
            value = urljoin(page_url, value)
        return value

    def extract(self, node: LexborNode | LexborHTMLParser, page_url: str) -> str | list[str] | None:
        """The field's value in ``node``: a string (or list with ``all``), None when nothing matched."""
        if self.selector is None:
            if isinstance(node, LexborHTMLParser):
                root = node.root
                if root is None:
                    return [] if self.all else None
                node = root
            value = self._value(node, page_url)
            if self.all:
                return [] if value is None else [value]
            return value
        if self.all:
            values = (self._value(match, page_url) for match in node.css(self.selector))
            return [v for v in values if v is not None]
        match = node.css_first(self.selector)
        return None if match is None else self._value(match, page_url)
