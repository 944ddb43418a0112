"""The ``href`` of a page's ``<a>`` and ``<base>`` elements read by a tokenizer alone, without building a
tree: :func:`crawlherd.page.extract_links`'s way for the pages where an HTML5 parser would find the same
elements in the same order -- the great majority. It follows the HTML5 tokenizer for what decides where a
tag starts and ends and what its attributes are: comments (``-->``, ``--!>``, ``<!-->``), bogus comments
(``<!...>``, ``<?...>``, ``</ ...>``), quoted and unquoted attribute values (a ``>`` inside quotes ends
nothing), end tags' attributes, the text of ``script``, ``style``, ``xmp``, ``iframe``, ``noembed``,
``noframes``, ``title`` and ``textarea`` (no tag inside), ``plaintext`` (text to the end), a tag cut off by
the end of the page (dropped), the first of repeated attributes, CR/CRLF read as LF, and character
references in attribute values (with the rule that leaves ``&copy=`` alone).

What only the tree builder knows is not guessed: a page with ``svg``, ``math`` (foreign content),
``template`` (content outside the document), ``table`` (misplaced content moved before the table),
``select``, ``frameset``, a script holding ``<!--`` (its escaped states) or a NUL character gets
:data:`TREE` -- the caller parses it. A property test holds this scanner to lexbor's parse.
"""

from __future__ import annotations

import re
from html.entities import html5

__all__ = ["TREE", "scan_links"]

#: What :func:`scan_links` answers for a page that needs a tree parser.
TREE = None

_WS = r"\t\n\f\r "
# An attribute's value: quoted (an unclosed quote runs to the end of the page), unquoted, or none.
_VALUE = rf"(?:\"[^\"]*+(?:\"|\Z)|'[^']*+(?:'|\Z)|(?:[^{_WS}>\"'][^{_WS}>]*+)?)"
# A tag's attributes, as the tokenizer reads them (possessive: a page never makes it backtrack; and no
# capturing group inside a possessive part, which Python 3.11's re reports wrong spans of).
_ATTRS = (
    rf"(?:[{_WS}/]*+[^{_WS}/>][^{_WS}/>=]*+(?:[{_WS}]*+=[{_WS}]*+{_VALUE})?+)*+[{_WS}/]*+"
)
_NAME_END = rf"(?![^{_WS}/>])"
_RAW = "style|xmp|iframe|noembed|noframes|title|textarea"
_SPECIAL = f"a|base|script|plaintext|svg|math|template|table|select|frameset|{_RAW}"
# The letters a special name starts with (both cases): most tags (div, li, h1, ...) are told apart by
# their first letter alone, before the names are tried one by one.
_SPECIAL_FIRST = "".join(sorted({c for name in _SPECIAL.split("|") for c in (name[0], name[0].upper())}))
# Everything up to the next <a> or <base> start tag (or a construct that needs the tree): text, comments,
# bogus comments and doctypes, end tags, other start tags, raw-text elements with their text. The
# alternatives exclude one another; the most frequent (text, ordinary start and end tags) come first.
_SKIP = (
    r"(?:[^<]++"
    rf"|<(?!(?=[{_SPECIAL_FIRST}])(?:{_SPECIAL}){_NAME_END})[A-Za-z][^{_WS}/>]*+{_ATTRS}(?:>|\Z)"
    rf"|</[A-Za-z][^{_WS}/>]*+{_ATTRS}(?:>|\Z)"
    r"|<(?![A-Za-z!/?])"
    r"|<!--(?:-?>|.*?(?:--!?>|\Z))"
    r"|<[!?][^>]*+>?"
    r"|</[^>]*+>?"
    + "".join(rf"|<{raw}{_NAME_END}{_ATTRS}>(?:[^<]++|<(?!/{raw}{_NAME_END}))*+" for raw in _RAW.split("|"))
    + rf"|<script{_NAME_END}{_ATTRS}>(?:[^<]++|<(?!/script{_NAME_END}|!--))*+(?=</script{_NAME_END}|\Z)"
    rf"|<plaintext{_NAME_END}{_ATTRS}(?:>.*+|\Z)"
    r")*+"
)
_HREF_VALUE = (
    rf"[{_WS}]*+=[{_WS}]*+(?:\"(?P<h1>[^\"]*+)(?:\"|\Z)|'(?P<h2>[^']*+)(?:'|\Z)|(?P<h3>(?:[^{_WS}>\"'][^{_WS}>]*+)?))"
)
_NEXT = re.compile(
    rf"{_SKIP}(?:<(?P<tag>a|base){_NAME_END}(?:[{_WS}/]*+href{_HREF_VALUE})?(?P<attrs>{_ATTRS})(?P<gt>>)?"
    r"|(?P<tree><)|\Z)",
    re.I | re.A | re.S,
)
# The first attribute named href of a tag's attributes, the others skipped in the pattern.
_HREF_NAME = rf"href(?![^{_WS}/>=])"
_FIRST_HREF = re.compile(
    rf"(?:[{_WS}/]*+(?!{_HREF_NAME})[^{_WS}/>][^{_WS}/>=]*+(?:[{_WS}]*+=[{_WS}]*+{_VALUE})?+)*+[{_WS}/]*+{_HREF_NAME}"
    rf"(?:{_HREF_VALUE})?",
    re.I | re.A,
)
_CHARREF = re.compile(r"&(?:#[xX]([0-9A-Fa-f]++);?|#([0-9]++);?|([A-Za-z0-9]++;?))")
# Numeric references to C1 controls that mean Windows-1252's characters (the HTML5 table).
_C1 = dict(zip(
    [0x80, *range(0x82, 0x8D), 0x8E, *range(0x91, 0x9D), 0x9E, 0x9F],
    "€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ",
    strict=True,
))


def scan_links(html: str) -> tuple[list[str], str | None] | None:
    """``(hrefs, base)``: the ``href`` of each ``<a>`` in document order (None for one without; values
    decoded as a parser decodes them) and the ``href`` of the first ``<base>`` that has one (None if no
    such ``<base>``) -- or :data:`TREE` for a page this scanner does not read (see the module)."""
    if "\x00" in html:
        return TREE
    hrefs: list[str] = []
    base: str | None = None
    match = _NEXT.match
    pos = 0
    end = len(html)
    while True:
        m = match(html, pos)
        if m is None:  # never: the pattern matches anywhere (the empty string at the end)
            return TREE
        tag = m["tag"]
        if tag is None:
            return TREE if m["tree"] is not None else (hrefs, base)
        if m["gt"] is not None:  # else cut off by the end of the page: dropped, as a parser drops it
            h1, h2, h3 = m.group("h1", "h2", "h3")
            if h1 is None and h2 is None and h3 is None:
                value = _attribute(m["attrs"])
            else:
                value = h1 if h1 is not None else h2 if h2 is not None else h3
            if tag in ("a", "A"):
                hrefs.append(_decoded(value) if value else "")
            elif base is None and value is not None:
                base = _decoded(value)
        pos = m.end()
        if pos >= end:
            return hrefs, base


def _attribute(attrs: str) -> str | None:
    """The value of the first ``href`` among a tag's attributes (``""`` for one without a value)."""
    m = _FIRST_HREF.match(attrs)
    if m is None:
        return None
    h1, h2, h3 = m.group("h1", "h2", "h3")
    return h1 if h1 is not None else h2 if h2 is not None else h3 if h3 is not None else ""


def _decoded(value: str) -> str:
    """An attribute value as a parser has it: CR and CRLF read as LF, character references replaced."""
    if "\r" in value:
        value = value.replace("\r\n", "\n").replace("\r", "\n")
    if "&" in value:
        if value.count("&") == value.count("&amp;"):  # the usual one (query strings), and only it
            return value.replace("&amp;", "&")
        value = _CHARREF.sub(_charref, value)
    return value


def _charref(m: re.Match[str]) -> str:
    hexa, dec, name = m.groups()
    if name is None:
        digits = (hexa if hexa is not None else dec).lstrip("0")
        if len(digits) > 7:  # past U+10FFFF in either base (and no int() of a 5,000-digit number)
            return "\ufffd"
        return _codepoint(int(digits or "0", 16 if hexa is not None else 10))
    if name in html5:
        if name.endswith(";"):
            return html5[name]
        following = m.string[m.end() : m.end() + 1]
        return m[0] if following == "=" else html5[name]  # alphanumerics: all taken by the pattern
    # Not a name of the table: a shorter one it starts with (a legacy name, without its semicolon) is
    # followed by an alphanumeric, and in an attribute such a reference stays as it is written.
    return m[0]


def _codepoint(number: int) -> str:
    """A numeric character reference's character (HTML5: NUL, surrogates and past U+10FFFF are U+FFFD)."""
    if number in _C1:
        return _C1[number]
    if number == 0 or number > 0x10FFFF or 0xD800 <= number <= 0xDFFF:
        return "\ufffd"
    return chr(number)
