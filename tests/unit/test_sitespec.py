"""SiteSpec: one typed website config, one set of defaults, validated once, round-trips through JSON."""

from __future__ import annotations

import string
from urllib.parse import quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from crawlherd.extract.pagination import Pagination
from crawlherd.sitespec import PaginationSpec, PolitenessSpec, SiteSpec, _quote_plus

BASE = {"name": "site", "base_url": "https://example.com", "search_url_template": "https://example.com/s?q={keywords}"}


def test_defaults_are_written_once() -> None:
    spec = SiteSpec.model_validate(BASE)
    assert spec.requires_playwright is False
    assert spec.pagination == PaginationSpec() and spec.paginator == Pagination()
    assert spec.politeness == PolitenessSpec(min_delay=1.0, max_concurrency=2, robots="obey")
    assert spec.revisit_age == 86_400 and spec.metadata == {} and spec.extraction == {}
    assert spec.rules is None and spec.detail_rules is None


def test_durations_and_built_rules() -> None:
    spec = SiteSpec.model_validate(
        {
            **BASE,
            "politeness": {"min_delay": "500ms", "robots": "ignore"},
            "revisit_age": "1h30m",
            "pagination": {"type": "next_link", "selector": "a[rel=next]", "max_pages": 3},
            "extraction": {"item_selector": "li", "fields": {"t": "h2"}, "detail_fields": {"d": ".d"}},
        }
    )
    assert spec.politeness.min_delay == 0.5 and spec.revisit_age == 5400
    assert spec.paginator.type == "next_link" and spec.paginator.max_pages == 3
    assert spec.detail_rules is spec.rules and spec.rules is not None and spec.rules.item_selector == "li"
    again = SiteSpec.model_validate_json(spec.model_dump_json())
    assert again == spec and again.rules == spec.rules and again.paginator == spec.paginator
    assert spec.search_url(keywords="a b", location=None) == "https://example.com/s?q=a+b"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"extraction": {"item_selector": "::"}}, "not a valid CSS selector"),
        ({"pagination": {"type": "next_link"}}, "needs a 'selector'"),
        ({"search_url_template": "https://example.com/?q={q}"}, "unknown placeholder"),
        ({"politeness": {"robots": "sometimes"}}, "robots"),
        ({"politeness": {"min_delay": "soon"}}, "not a duration"),
        ({"revisit_age": 0}, "revisit_age"),
        ({"surprise": 1}, "surprise"),
        ({"name": "has space"}, "name"),
    ],
)
def test_a_bad_spec_is_refused_where_it_is_declared(change: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        SiteSpec.model_validate({**BASE, **change})


def test_frozen() -> None:
    spec = SiteSpec.model_validate(BASE)
    with pytest.raises(ValidationError, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(st.text() | st.text(alphabet=string.ascii_letters + string.digits + " _.-~+&é"))
def test_search_urls_quote_as_quote_plus_does(value: str) -> None:
    assert _quote_plus(value) == quote_plus(value)
