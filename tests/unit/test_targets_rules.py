"""The targets importer checks extraction rules and pagination with the worker's own code."""

from __future__ import annotations

import pytest

from crawlherd.dispatch.targets_file import parse_targets
from crawlherd.errors import TargetsFileError

SITE = """\
[[websites]]
name = "shop"
base_url = "https://shop.example"
search_url_template = "https://shop.example/?q={{keywords}}"
{extra}
"""


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ('extraction = { item_selector = "div..card" }', "not a valid CSS selector"),
        ('extraction = { item = "div.card" }', "unknown extraction key"),
        ('extraction = { fields = { title = "h2" } }', "need an item_selector"),
        ('extraction = { item_selector = "div", fields = { t = "h2@9bad" } }', "fields"),
        ('pagination = { type = "next_link", selector = "a::nope" }', "not a valid CSS selector"),
    ],
)
def test_bad_rules_are_refused_at_import_naming_the_website(extra: str, problem: str) -> None:
    with pytest.raises(TargetsFileError, match=problem) as info:
        parse_targets(SITE.format(extra=extra), path="t.toml")
    assert "shop" in str(info.value)


def test_good_rules_pass() -> None:
    spec = parse_targets(
        SITE.format(extra='extraction = { item_selector = "div.card", item_url = "a@href", fields = { t = "h2" } }'),
        path="t.toml",
    )
    assert spec.websites[0].extraction["item_selector"] == "div.card"
