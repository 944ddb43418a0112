"""What a fetched HTML page holds for a reader: its links, its cleaned HTML and the Markdown of its main
content. :class:`~crawlherd.result.CrawlResult` computes each on first access (never during a crawl
that does not ask), so these are plain functions of the page's text and URL.

- :func:`extract_links`: absolute http(s) links of ``<a href>`` (``<base href>`` honoured).
- :func:`clean_html`: the document without scripts, styles, comments, ``<noscript>``, ``<iframe>``,
  forms' hidden inputs, inline event handlers and ``style`` attributes.
- :func:`main_content_markdown`: the page's main content (``<main>``, else ``<article>``, else
  ``[role=main]``, else ``<body>`` without its ``nav``/``header``/``footer``/``aside``) as Markdown,
  converted by markdownify (extra ``crawlherd[markdown]``), with links made absolute.
"""

from __future__ import annotations

import contextlib
import re
from urllib.parse import urljoin

from crawlherd._links_scan import scan_links
from crawlherd.errors import ConfigurationError, PageTooComplexError
from crawlherd.url import split_origin

__all__ = [
    "MAX_HTML_DEPTH",
    "MAX_HTML_WORK",
    "OFF_LOOP_CHARS",
    "clean_html",
    "extract_links",
    "html_cost",
    "main_content_markdown",
]

#: Pages nested deeper than this many elements are refused before they are parsed. Browsers stop
#: nesting at a few hundred (Blink: 512); a hostile page of 150,000 nested ``<div>``s would take
#: minutes to parse, because an HTML parser scans its stack of open elements on every tag.
MAX_HTML_DEPTH = 1024
#: The parse budget: the sum, over the page's start tags, of how deep each one opens. A page of
#: 10,000 elements 30 deep costs 300,000; the default lets through flat pages of millions of tags and
#: stops any page that would hold a parser for more than a fraction of a second.
MAX_HTML_WORK = 20_000_000
#: Pages longer than this (characters) are parsed in a thread (the parser releases the GIL), so that
#: the event loop -- every other fetch of the process -- goes on meanwhile.
OFF_LOOP_CHARS = 256 * 1024

# Elements that never hold children, and those whose end tag the parser implies (a page of 5,000
# unclosed <li> or <p> is flat, not 5,000 deep).
_NO_DEPTH = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
    | {"p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead", "tbody", "tfoot", "rb", "rt", "rtc"}
    | {"rp", "colgroup", "caption", "html", "head", "body"}
)
_RAW = re.compile(r"<!--.*?-->|<(script|style|textarea|title)\b.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)")


def html_cost(html: str, *, max_depth: int = MAX_HTML_DEPTH, max_work: int = MAX_HTML_WORK) -> None:
    """Raise :class:`~crawlherd.errors.PageTooComplexError` when ``html`` nests deeper than
    ``max_depth`` elements or would cost more than ``max_work`` to parse (see :data:`MAX_HTML_WORK`).

    A linear scan of the tags (comments, scripts and styles skipped), an estimate from above: end
    tags that a parser would imply are not guessed, so a sloppy page counts a little deeper."""
    opened = html.count("<")  # every tag counted starts with one: a page with few is within both limits
    if opened > max_depth or opened * (opened + 1) // 2 > max_work:
        _count_nesting(html, max_depth, max_work)


def _count_nesting(html: str, max_depth: int, max_work: int) -> None:
    """:func:`html_cost`'s scan of the tags."""
    depth = work = 0
    for closing, name in _TAG.findall(_RAW.sub("", html) if "<" in html else ""):
        if name.lower() in _NO_DEPTH:
            continue
        if closing:
            depth = max(depth - 1, 0)
            continue
        depth += 1
        work += depth
        if depth > max_depth:
            raise PageTooComplexError(
                f"the page nests elements more than {max_depth} deep; refused before parsing "
                "(a hostile or broken page: browsers stop nesting long before that)"
            )
    if work > max_work:
        raise PageTooComplexError(
            f"the page would cost {work:,} to parse, over the budget of {max_work:,} "
            "(deeply nested and very large); refused before parsing"
        )


_SKIPPED_SCHEMES = ("#", "javascript:", "mailto:", "tel:", "data:")
# A <base> element starts so (any case): a page without it is not searched for one.
_BASE_TAG = re.compile(r"<base", re.I)
# Links that urljoin() would only copy (an absolute http(s) URL with a plain host) or append to the
# page's scheme://host (a path from the root, without dot segments): what is before their fragment,
# without the parameters, tabs, line breaks, empty query or odd host that urljoin() rewrites.
_ABSOLUTE = re.compile(r"https?://[A-Za-z0-9._~%!$&'()*+,=:@-]+(?:/[^?#;\t\r\n]*)?(?:\?[^#\t\r\n]+)?")
_ROOTED = re.compile(r"/(?!/)[^?#;\t\r\n]*(?:\?[^#\t\r\n]+)?")
_NOISE = ("script", "style", "noscript", "iframe", "template", "svg", "canvas", "object", "embed")
_CHROME = ("nav", "header", "footer", "aside", "form", "dialog")
_MAIN = ("main", "article", "[role=main]")


def extract_links(html: str, base_url: str) -> list[str]:
    """Absolute http(s) links of ``<a href>`` in ``html`` (``<base href>`` honoured), fragments
    dropped, duplicates removed, document order kept; a malformed link is left out. A page over the
    parse budget raises :class:`~crawlherd.errors.PageTooComplexError` (:func:`html_cost`).

    Most pages are read by a tokenizer that builds no tree (:mod:`crawlherd._links_scan`); those where
    only an HTML5 tree builder knows which links there are, and in what order, and those longer than
    :data:`OFF_LOOP_CHARS`, are parsed (lexbor)."""
    html_cost(html)
    # A long page goes to lexbor, which lets the event loop (or other threads) run while it parses.
    scanned = scan_links(html) if len(html) <= OFF_LOOP_CHARS else None
    if scanned is None:
        hrefs, base = _links_by_tree(html)
    else:
        hrefs, base = scanned
    if base is not None:
        with contextlib.suppress(ValueError):  # a malformed one is ignored, as browsers do
            base_url = urljoin(base_url, base)
    origin = _origin(base_url)
    seen: dict[str, None] = {}
    for raw in hrefs:
        href = raw.strip()
        if not href or href.startswith(_SKIPPED_SCHEMES):
            continue
        try:
            url = join_link(base_url, href, origin)
        except ValueError:  # a malformed link (an unclosed IPv6 bracket) cannot be followed
            continue
        if url.startswith(("http://", "https://")):
            seen.setdefault(url, None)
    return list(seen)


def _links_by_tree(html: str) -> tuple[list[str], str | None]:
    """:func:`~crawlherd._links_scan.scan_links`'s answer from lexbor's parse of the page."""
    from selectolax.lexbor import LexborHTMLParser as HTMLParser

    tree = HTMLParser(html)
    base = tree.css_first("base[href]") if _BASE_TAG.search(html) is not None else None
    # not css("a[href]"): the same elements, without a selector engine per page
    hrefs = [node.attributes.get("href") or "" for node in tree.tags("a")]
    return hrefs, None if base is None else base.attributes.get("href") or ""


def _origin(base_url: str) -> str | None:
    """``scheme://netloc`` of ``base_url`` as urljoin() reads it, when it is an http(s) URL with a host
    (None: every link takes urljoin())."""
    try:
        scheme, netloc = split_origin(base_url)
    except ValueError:
        return None
    if scheme not in ("http", "https") or not netloc:
        return None
    return f"{scheme}://{netloc}"


def join_link(base_url: str, href: str, origin: str | None) -> str:
    """``urljoin(base_url, href)`` without its fragment; ``origin`` is :func:`_origin` of ``base_url``.
    The links most pages hold (absolute, or a path from the root) are joined without parsing either
    URL -- to the same string: a property test holds it to urljoin()."""
    if origin is not None:
        head = href.partition("#")[0]
        if head[:1] == "/":
            if _ROOTED.fullmatch(head) is not None and "/." not in head.partition("?")[0]:
                return origin + head
        elif _ABSOLUTE.fullmatch(head) is not None:
            return head
    return urljoin(base_url, href).split("#", 1)[0]


def clean_html(html: str) -> str:
    """``html`` without what a reader never sees: scripts, styles, ``noscript``, ``iframe``,
    templates, inline SVG/canvas/objects, comments, hidden inputs, ``on*`` handlers and ``style``
    attributes. The structure and the text are kept. A page over the parse budget raises
    :class:`~crawlherd.errors.PageTooComplexError` (:func:`html_cost`)."""
    from selectolax.lexbor import LexborHTMLParser as HTMLParser

    html_cost(html)
    tree = HTMLParser(html)
    tree.strip_tags(list(_NOISE))
    for node in tree.css("input[type=hidden]"):
        node.decompose()
    root = tree.root
    for node in list(root.traverse(include_text=True)) if root is not None else ():
        tag = node.tag
        if tag == "-comment":
            node.decompose()
            continue
        if tag == "-text":
            continue
        attrs = node.attributes
        for name in [n for n in attrs if n == "style" or n.startswith("on")]:
            del node.attrs[name]
    body = tree.body
    return (body.html if body is not None else tree.html) or ""


def main_content_html(html: str) -> str:
    """The HTML of the page's main content: ``<main>``, ``<article>`` or ``[role=main]`` when the
    page marks one, else ``<body>`` without its navigation, header, footer, asides and forms."""
    from selectolax.lexbor import LexborHTMLParser as HTMLParser

    tree = HTMLParser(clean_html(html))
    for selector in _MAIN:
        node = tree.css_first(selector)
        if node is not None and (node.text(strip=True) or ""):
            return node.html or ""
    tree.strip_tags(list(_CHROME))
    body = tree.body
    return (body.html if body is not None else tree.html) or ""


def main_content_markdown(html: str, base_url: str) -> str:
    """The page's main content as Markdown (ATX headings, ``-`` bullets), links and images made
    absolute against ``base_url``. Needs markdownify: ``pip install 'crawlherd[markdown]'``."""
    try:
        from markdownify import markdownify
    except ImportError:
        raise ConfigurationError(
            "CrawlResult.markdown needs markdownify: pip install 'crawlherd[markdown]'"
        ) from None
    from selectolax.lexbor import LexborHTMLParser as HTMLParser

    tree = HTMLParser(main_content_html(html))
    for selector, attr in (("a[href]", "href"), ("img[src]", "src")):
        for node in tree.css(selector):
            node.attrs[attr] = urljoin(base_url, node.attributes.get(attr) or "")
    body = tree.body
    markdown: str = markdownify((body.html if body is not None else tree.html) or "", heading_style="ATX",
                                bullets="-", strip=["span"])
    lines = [line.rstrip() for line in markdown.strip().splitlines()]
    out: list[str] = []
    for line in lines:  # at most one blank line in a row
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")
