from __future__ import annotations

import pytest

from crawlherd.errors import ConfigurationError
from crawlherd.extract.rules import ExtractionRules, Page
from crawlherd.extract.selectors import FieldRule
from crawlherd.item import item_fingerprint, make_item

PAGE = "https://jobs.example/search?q=python&page=2"
HTML = """
<html><body>
<div class="card" data-id="7">
  <h2 class="title"><a class="link" href="/jobs/7?b=2&a=1">Senior   <b>Python</b>
     Developer</a></h2>
  <span class="company"> Acme </span>
  <span class="tag">remote</span><span class="tag">senior</span>
  <img class="logo" src="logo7.png">
</div>
<div class="card" data-id="8">
  <h2 class="title"><a class="link" href="https://jobs.example/jobs/8">Rust Engineer</a></h2>
</div>
<div class="card" data-id="9">
  <h2 class="title"></h2>
  <a class="link" href="/jobs/9">no title</a>
</div>
<div class="card" data-id="10">
  <h2 class="title"><a class="link" href="javascript:void(0)">Broken link</a></h2>
</div>
<div class="card" data-id="11">
  <h2 class="title"><a class="link" href="/jobs/7?a=1&b=2#top">Same posting again</a></h2>
</div>
<nav><a rel="next" href="?q=python&page=3">next</a></nav>
</body></html>
"""

RULES = {
    "item_selector": "div.card",
    "item_url": "a.link",
    "next_link": "a[rel=next]",
    "required": ["title"],
    "fields": {
        "title": "h2.title",
        "company": ".company",
        "job_id": "@data-id",
        "logo": {"selector": "img.logo", "attr": "src", "absolute": True},
        "tags": {"selector": ".tag", "all": True},
    },
}


def test_extracts_fields_urls_and_next_link() -> None:
    rules = ExtractionRules.from_mapping("jobs", RULES)
    result = rules.extract(HTML, PAGE)
    assert [item.url for item in result.items] == [
        "https://jobs.example/jobs/7?b=2&a=1",
        "https://jobs.example/jobs/8",
    ]
    first = result.items[0]
    assert first.website == "jobs"
    assert first.fields == {
        "title": "Senior Python Developer",
        "company": "Acme",
        "job_id": "7",
        "logo": "https://jobs.example/logo7.png",
        "tags": ["remote", "senior"],
    }
    second = result.items[1].fields
    assert second["company"] is None and second["tags"] == [] and second["logo"] is None
    assert result.next_url == "https://jobs.example/search?q=python&page=3"
    # card 9: empty required title; card 10: javascript: URL; card 11: same canonical URL as card 7
    assert len(result.dropped) == 3
    assert "required" in result.dropped[0] and "title" in result.dropped[0]
    assert "javascript" in result.dropped[1]
    assert "duplicate" in result.dropped[2]


def test_fingerprint_is_website_plus_canonical_url() -> None:
    a = item_fingerprint("jobs", "https://JOBS.example:443/jobs/7?b=2&a=1#x")
    assert a == item_fingerprint("jobs", "https://jobs.example/jobs/7?a=1&b=2")
    assert len(a) == 8
    assert a != item_fingerprint("other-site", "https://jobs.example/jobs/7?a=1&b=2")
    assert a != item_fingerprint("jobs", "https://jobs.example/Jobs/7?a=1&b=2")
    item = make_item("jobs", "https://jobs.example/jobs/7?a=1&b=2", {"x": 1})
    assert item.fingerprint == a
    assert item.as_dict() == {
        "website": "jobs",
        "url": "https://jobs.example/jobs/7?a=1&b=2",
        "fingerprint": a.hex(),
        "fields": {"x": 1},
    }


def test_items_without_url_rule_live_on_the_page_and_differ_by_content() -> None:
    rules = ExtractionRules.from_mapping("jobs", {"item_selector": "span.tag", "fields": {"name": "@class"}})
    html = "<p><span class='tag'>a</span><span class='tag b'>b</span></p>"
    items = rules.extract(html, PAGE).items
    assert [i.url for i in items] == [PAGE, PAGE]
    assert items[0].fingerprint != items[1].fingerprint
    again = rules.extract(html, PAGE).items
    assert [i.fingerprint for i in again] == [i.fingerprint for i in items]


def test_callable_as_handler_and_detail_fields() -> None:
    rules = ExtractionRules.from_mapping(
        "jobs",
        {
            "item_selector": "div.card",
            "item_url": "a.link",
            "detail_fields": {"title": "h1", "tags": {"selector": "li", "all": True}},
        },
    )
    result = rules(Page(url=PAGE, html=HTML, website="jobs"))
    # no required fields: card 9 is kept; card 10 (javascript:) and 11 (duplicate) are dropped
    assert [i.url.rsplit("/", 1)[1] for i in result.items] == ["7?b=2&a=1", "8", "9"]
    detail = rules.extract_detail("<h1> Title  here </h1><ul><li>a</li><li>b</li></ul>", PAGE)
    assert detail == {"title": "Title here", "tags": ["a", "b"]}


@pytest.mark.parametrize(
    ("spec", "selector", "attr"),
    [
        ("h2.title", "h2.title", None),
        ("a.link@href", "a.link", "href"),
        ("@data-id", None, "data-id"),
        ('a[href*="@"]', 'a[href*="@"]', None),
        ('a[href*="@"]@href', 'a[href*="@"]', "href"),
        ({"selector": "img", "attr": "src"}, "img", "src"),
    ],
)
def test_field_spec_forms(spec: object, selector: str | None, attr: str | None) -> None:
    rule = FieldRule.parse("f", spec, website="w")
    assert (rule.selector, rule.attr) == (selector, attr)
    assert FieldRule.parse("f", rule.spec(), website="w") == rule


def test_to_mapping_round_trips() -> None:
    rules = ExtractionRules.from_mapping("jobs", RULES)
    assert ExtractionRules.from_mapping("jobs", rules.to_mapping()) == rules


@pytest.mark.parametrize(
    ("rules", "words"),
    [
        ({"item_selector": "div[[", "fields": {}}, ["'jobs'", "item_selector", "div[["]),
        ({"item_selector": "div", "fields": {"salary": "span::nope"}}, ["'jobs'", "fields.salary", "span::nope"]),
        ({"item_selector": "div", "fields": {"x": 3}}, ["fields.x", "selector string"]),
        ({"item_selector": "div", "fields": {"x": "a@"}}, ["fields.x"]),
        ({"item_selector": "div", "fields": {"x": {"selector": "a", "alll": True}}}, ["fields.x", "alll"]),
        ({"item_selector": "div", "fields": {"x": {"selector": "a", "all": "yes"}}}, ["fields.x", "'all'"]),
        ({"item_selector": "div", "item_url": "a[[href"}, ["item_url"]),
        ({"item_selector": "div", "required": ["nope"]}, ["required", "nope"]),
        ({"fields": {}}, ["item_selector"]),
        ({"item_selector": "div", "extra": 1}, ["extra"]),
        ({"item_selector": "div", "fields": {"x": {"attr": "bad attr"}}}, ["fields.x", "bad attr"]),
    ],
)
def test_bad_rules_name_the_website_and_field(rules: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        ExtractionRules.from_mapping("jobs", rules)
    message = str(info.value)
    assert "jobs" in message
    for word in words:
        assert word in message


def test_bytes_input_and_empty_page() -> None:
    rules = ExtractionRules.from_mapping("jobs", RULES)
    assert len(rules.extract(HTML.encode(), PAGE).items) == 2
    empty = rules.extract("<html></html>", PAGE)
    assert empty.items == [] and empty.next_url is None and empty.dropped == []
