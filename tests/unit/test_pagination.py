from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlherd.errors import ConfigurationError
from crawlherd.extract.pagination import (
    Pagination,
    get_query_param,
    increment_query_param,
    next_link_url,
    set_query_param,
)


def test_set_query_param_replaces_in_place_or_appends() -> None:
    assert set_query_param("https://x.test/s?q=a&page=2&l=b", "page", 3) == "https://x.test/s?q=a&page=3&l=b"
    assert set_query_param("https://x.test/s?q=a", "page", 1) == "https://x.test/s?q=a&page=1"
    assert set_query_param("https://x.test/s", "page", 1) == "https://x.test/s?page=1"
    assert set_query_param("https://x.test/s?page=1&x=1&page=9", "page", 2) == "https://x.test/s?page=2&x=1"
    assert set_query_param("https://x.test/s?q=a b#frag", "p", "x y") == "https://x.test/s?q=a b&p=x+y#frag"


def test_increment_query_param() -> None:
    assert increment_query_param("https://x.test/s?q=a&page=2", "page") == "https://x.test/s?q=a&page=3"
    assert increment_query_param("https://x.test/s?q=a", "page") == "https://x.test/s?q=a&page=2"
    assert increment_query_param("https://x.test/s?q=a", "offset", start=0, step=20) == "https://x.test/s?q=a&offset=20"
    assert increment_query_param("https://x.test/s?offset=40", "offset", step=20) == "https://x.test/s?offset=60"
    with pytest.raises(ConfigurationError, match="not an integer"):
        increment_query_param("https://x.test/s?page=two", "page")


_names = st.text(alphabet="abcdefghijklmnop_", min_size=1, max_size=6)
_values = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=8)


@given(st.dictionaries(_names, _values, max_size=5), _names, _values)
def test_set_query_param_sets_one_and_keeps_the_rest(params: dict[str, str], name: str, value: str) -> None:
    from urllib.parse import urlencode

    url = "https://x.test/p?" + urlencode(params) if params else "https://x.test/p"
    out = set_query_param(url, name, value)
    assert get_query_param(out, name) == value
    pairs = parse_qsl(urlsplit(out).query, keep_blank_values=True)
    assert [k for k, _ in pairs].count(name) == 1
    assert {k: v for k, v in pairs if k != name} == {k: v for k, v in params.items() if k != name}


def test_next_link_url() -> None:
    page = "https://x.test/browse/python/berlin?page=1"
    html = '<a class="next" rel="next" href="?page=2">next</a>'
    assert next_link_url(html, page, "a[rel=next]") == "https://x.test/browse/python/berlin?page=2"
    assert next_link_url(html, page, "a.missing") is None
    assert next_link_url('<a class="next" href="?page=1#top">again</a>', page, "a.next") is None  # same page
    assert next_link_url('<a class="next" href="javascript:go()">x</a>', page, "a.next") is None
    assert next_link_url('<a class="next" data-u="/p/2">x</a>', page, "a.next@data-u") == "https://x.test/p/2"


def test_page_param_pagination_stops_on_no_new_items_or_cap() -> None:
    pag = Pagination.from_settings("page_param", {"param": "p", "max_pages": 3}, website="w")
    first = pag.first_url("https://x.test/s?q=a")
    assert first == "https://x.test/s?q=a&p=1"
    second = pag.next_url(first, pages_fetched=1, new_items=10)
    assert second == "https://x.test/s?q=a&p=2"
    assert pag.next_url(second, pages_fetched=2, new_items=0) is None
    assert pag.next_url(second, pages_fetched=2, new_items=5) == "https://x.test/s?q=a&p=3"
    assert pag.next_url("https://x.test/s?q=a&p=3", pages_fetched=3, new_items=5) is None
    assert Pagination.from_settings("page_param", pag.to_settings(), website="w") == pag


def test_next_link_and_none_pagination() -> None:
    pag = Pagination.from_settings("next_link", {"selector": "a.next", "max_pages": 2}, website="w")
    html = '<a class="next" href="/b?page=2">n</a>'
    assert pag.next_url("https://x.test/b", pages_fetched=1, html=html) == "https://x.test/b?page=2"
    assert pag.next_url("https://x.test/b?page=2", pages_fetched=2, html=html) is None
    assert pag.next_url("https://x.test/b", pages_fetched=1, html="<p>last</p>") is None
    assert Pagination.from_settings("next_link", pag.to_settings(), website="w") == pag
    none = Pagination.from_settings("none", None, website="w")
    assert none.first_url("https://x.test/s") == "https://x.test/s"
    assert none.next_url("https://x.test/s", pages_fetched=1, new_items=5) is None


@pytest.mark.parametrize(
    ("kind", "settings", "words"),
    [
        ("infinite", {}, ["'site'", "infinite", "page_param"]),
        ("next_link", {}, ["'site'", "selector"]),
        ("next_link", {"selector": "a[["}, ["'site'", "pagination.selector"]),
        ("page_param", {"max_pages": 0}, ["max_pages"]),
        ("page_param", {"step": "2"}, ["step"]),
        ("page_param", {"selector": "a"}, ["selector", "page_param"]),
        ("none", {"param": "p"}, ["param"]),
        ("page_param", {"param": ""}, ["param"]),
    ],
)
def test_bad_pagination_settings(kind: str, settings: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        Pagination.from_settings(kind, settings, website="site")
    for word in words:
        assert word in str(info.value)
