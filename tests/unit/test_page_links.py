"""Link extraction's shortcuts give what the long way gives: ``join_link`` is ``urljoin`` without the
fragment, ``split_origin`` (and the crawl's link host) ``urlsplit``'s, ``html_cost`` without its scan
refuses exactly what the scan refuses, and ``extract_links`` finds the links (and the ``<base href>``)
that searching the whole parsed page finds. A malformed link is left out, never the page."""

from __future__ import annotations

import contextlib
import os
import re
from urllib.parse import urljoin, urlsplit

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from crawlherd._links_scan import scan_links
from crawlherd.crawler.follow import _hostname
from crawlherd.errors import PageTooComplexError
from crawlherd.page import _count_nesting, _links_by_tree, _origin, extract_links, html_cost, join_link
from crawlherd.url import split_origin

PROPERTY = settings(
    max_examples=int(os.environ.get("CRAWLHERD_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# The pieces URLs are made of, with what urljoin treats specially: dot segments, parameters, empty
# queries and fragments, tabs and line breaks, brackets, backslashes, case, other schemes.
_PIECES = st.sampled_from(
    [
        "/",
        "//",
        ".",
        "..",
        "./",
        "../",
        "/.",
        "/..",
        "?",
        "#",
        ";",
        ":",
        "@",
        "a",
        "B",
        "é",
        "%2F",
        "=",
        "&",
        "\t",
        "\n",
        "\r",
        " ",
        "[",
        "]",
        "[::1]",
        "\\",
        "http://",
        "https://",
        "HTTP://",
        "ftp://",
        "mailto:",
        "site.example",
        "x.example:8080",
        "user:pw@",
        "p",
        "q=1",
        ".html",
        "~",
    ]
)
_TEXT = st.lists(_PIECES, max_size=10).map("".join)
_BASES = (
    st.sampled_from(
        [
            "http://site.example/dir/page",
            "https://site.example",
            "http://Site.Example:8080/a/b/?q=1#f",
            "HTTP://site.example/",
            "http://user:pw@site.example/x;p?q",
            "ftp://site.example/a",
            "http:/nohost",
            "http://[::1]:8080/a/",
            "http://[bad/a",
        ]
    )
    | _TEXT
)


def _joined(base: str, href: str) -> str | type[BaseException]:
    try:
        return urljoin(base, href).split("#", 1)[0]
    except ValueError:
        return ValueError


@PROPERTY
@given(base=_BASES, href=_TEXT)
@example(base="http://site.example/a", href="/x?#f")
@example(base="http://site.example/a", href="http://o.example/a;p")
@example(base="https://site.example/a", href="http://o.example/a/../b?")
@example(base="http://site.example/a", href="/a/./b")
def test_join_link_is_urljoin_without_the_fragment(base: str, href: str) -> None:
    origin = _origin(base)
    try:
        got: str | type[BaseException] = join_link(base, href, origin)
    except ValueError:
        got = ValueError
    assert got == _joined(base, href)


@PROPERTY
@given(url=_BASES | _BASES.map(lambda b: b + "/x?y#z") | st.text(max_size=30))
@example(url="http://A%B.example/")
@example(url="http://u@[::1]:80/")
def test_split_origin_and_hostname_are_urlsplits(url: str) -> None:
    try:
        want: object = urlsplit(url)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            split_origin(url)
        return
    assert split_origin(url) == (want.scheme, want.netloc)  # type: ignore[attr-defined]
    assert _hostname(url) == (want.hostname or "").lower()  # type: ignore[attr-defined]


_TAGS = st.sampled_from(
    [
        "<div>",
        "</div>",
        "<p>",
        "<li>",
        "<br>",
        "<!-- ",
        " -->",
        "<script>",
        "</script>",
        "<a>",
        "</a>",
        "<",
        "x",
        "<<",
        "<DIV>",
        "</ div>",
        "<title>",
        "</title>",
    ]
)


@PROPERTY
@given(soup=st.lists(_TAGS, max_size=60).map("".join), max_depth=st.integers(0, 12), max_work=st.integers(0, 60))
def test_html_cost_refuses_what_its_scan_refuses(soup: str, max_depth: int, max_work: int) -> None:
    def refused(check: object) -> bool:
        try:
            check()  # type: ignore[operator]
        except PageTooComplexError:
            return True
        return False

    assert refused(lambda: html_cost(soup, max_depth=max_depth, max_work=max_work)) == refused(
        lambda: _count_nesting(soup, max_depth, max_work)
    )


def _links_the_long_way(html: str, base_url: str) -> list[str]:
    """extract_links as it was before its shortcuts: the whole page searched, every link joined."""
    tree = LexborHTMLParser(html)
    base = tree.css_first("base[href]")
    if base is not None:
        with contextlib.suppress(ValueError):
            base_url = urljoin(base_url, base.attributes.get("href") or "")
    seen: dict[str, None] = {}
    for node in tree.css("a[href]"):
        href = (node.attributes.get("href") or "").strip()
        if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
            continue
        try:
            url = urljoin(base_url, href).split("#", 1)[0]
        except ValueError:
            continue
        if url.startswith(("http://", "https://")):
            seen.setdefault(url, None)
    return list(seen)


_HREFS = _TEXT.map(lambda t: t.replace('"', "")) | st.sampled_from(["/a", "/b?x=1#y", "c/d", "http://o.example/"])
_ELEMENTS = st.one_of(
    _HREFS.map(lambda h: f'<a href="{h}">link</a>'),
    _HREFS.map(lambda h: f"<A HREF='{h}'>link</A>"),
    _HREFS.map(lambda h: f'<base href="{h}">'),
    _HREFS.map(lambda h: f'<BASE\nhref="{h}">'),
    st.sampled_from(
        [
            "<p>text",
            "<!-- <base href='/x/'> -->",
            "<basefont>",
            "<div>",
            "</div>",
            "&amp;",
            "<",
            "<a>",
            "<a href>",
            "<svg>",
            "</svg>",
            "<template>",
            "</template>",
            "<math>",
            "<table>",
            "<script>",
        ]
    ),
)


@PROPERTY
@given(parts=st.lists(_ELEMENTS, max_size=12), base=st.sampled_from(["http://site.example/d/p", "https://s.example"]))
@example(parts=['<base href="http://other.example/x/">', '<a href="y">y</a>'], base="http://site.example/")
def test_extract_links_finds_what_the_long_way_finds(parts: list[str], base: str) -> None:
    html = "<html><body>" + "".join(parts) + "</body></html>"
    assert extract_links(html, base) == _links_the_long_way(html, base)


def test_a_malformed_link_or_base_is_left_out_not_the_page() -> None:
    page = '<base href="//[x"><a href="//[bad">x</a> <a href="/ok">ok</a>'
    assert extract_links(page, "http://site.example/d/") == ["http://site.example/ok"]


def test_html_cost_still_refuses_deep_pages_past_the_shortcut() -> None:
    with pytest.raises(PageTooComplexError):
        html_cost("<div>" * 1_025)
    html_cost("<div>" * 1_024)


# Pieces of markup where a tokenizer can go wrong: quotes (a '>' inside them), unquoted values, attributes
# on end tags, comments of every shape, bogus comments, raw text holding tags, character references, CR,
# a tag cut off by the end of the page -- and the constructs only a tree builder reads (the scanner hands
# those pages to lexbor: TREE).
_SOUP = st.sampled_from(
    [
        '<a href="/q">', "<a href='/s q'>", "<a href=/u?x=1>", "<A HREF=/U>", "<a\rhref=/cr>", "<a/href=/sl>",
        "<a href = '/sp'>", "<a href>", "<a href=>", "<a>", "</a>", '<a title=">" href=/t>', "<a hreflang=x href=/l>",
        "<a href=/1 href=/2>", '<a href="/d"x=y>', "<base href=/b/>", "<BASE HREF='http://o.example/c/'>",
        "<base>", "<base href>", '</div title=">"><a href=/e>', "<!-- <a href=/c> -->", "<!-->", "<!--->",
        "<!---->", "--!>", "-->", "<!-- -", "<!", "<!x>", "<!DOCTYPE html>", "<?x <a href=/pi>?>", "</ x>", "</>",
        "</", "<", "<<", "<p>", "<div>", "</div>", "<br/>", "<style>", "</style>", "<title>", "</TITLE >",
        "<textarea>", "</textarea>", "<xmp>", "</xmp>", "<iframe>", "</iframe>", "<noembed>", "<noframes>",
        "<noscript>", "</noscript>", "<script>", "</script>", "<script><!--", "<plaintext>", "<svg>", "<table>",
        "<template>", "<select>", "&amp;", "&copy=", "&copy", "&#x26;", "&#38", "&#0;", "&#128;", "&#xD800;",
        "&#99999999999;", "&notit;", "&lt;", "&ampx", "&amp", "=", '"', "'", "x", " ", "\n", "\r\n", "/",
        '<a href="/r&amp;s&copy=1&#128;&notit;&lt&#x41">', "<a href='/v\r\nw'>", "<a href=\"/open",
    ]
)


@PROPERTY
@given(parts=st.lists(_SOUP, max_size=16))
@example(parts=["<a href='/s q'>", "<script>", "<a href=/u?x=1>", "</script>", "<a href=/U>"])
@example(parts=["<!-- -", "<a href=/u?x=1>", "-->", "<a href>", "<base href>", "<base href=/b/>"])
def test_the_scanner_reads_what_lexbor_parses(parts: list[str]) -> None:
    html = "".join(parts)
    scanned = scan_links(html)
    if scanned is not None:  # else a page for the tree: lexbor reads it
        hrefs, base = _links_by_tree(html)
        # the tree may hold a link twice (an <a> the parser reopens is a copy, later in the page)
        assert (list(dict.fromkeys(scanned[0])), scanned[1]) == (list(dict.fromkeys(hrefs)), base)
        assert extract_links(html, "http://site.example/d/p") == _links_the_long_way(html, "http://site.example/d/p")


def test_the_scanner_reads_ordinary_pages_and_leaves_the_others_to_the_tree() -> None:
    page = (
        '<!doctype html><html><head><title>t <a href="/no"></title><base href="/b/"></head><body>'
        '<!-- <a href="/no"> --><a class="x" href="job?id=1&amp;p=2">j</a><script>if (a<b) "<a href=/no>"'
        '</script><a title="a > b" href=\'/k\'>k</a></body></html>'
    )
    assert scan_links(page) == (["job?id=1&p=2", "/k"], "/b/")
    assert extract_links(page, "http://site.example/d/") == [
        "http://site.example/b/job?id=1&p=2", "http://site.example/k"
    ]
    for tree_only in ("<table><a href=/a></table>", "<svg><a href=/a></svg>", "<template></template>", "a\x00b",
                      "<script><!--<script></script><a href=/a></script>"):
        assert scan_links(tree_only) is None
        assert extract_links(tree_only, "http://site.example/") == [
            urljoin("http://site.example/", h) for h in _links_by_tree(tree_only)[0] if h
        ]


def test_a_page_longer_than_the_off_loop_size_is_parsed_not_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    import crawlherd.page

    def no_scan(html: str) -> None:
        raise AssertionError("scanned")

    monkeypatch.setattr(crawlherd.page, "scan_links", no_scan)
    page = '<a href="/a">a</a>' + "x" * crawlherd.page.OFF_LOOP_CHARS
    assert extract_links(page, "http://site.example/") == ["http://site.example/a"]
