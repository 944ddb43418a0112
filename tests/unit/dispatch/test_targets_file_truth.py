"""Targets files tell every problem at once, by line in TOML as in YAML (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from crawlherd.cli import main
from crawlherd.dispatch.targets_file import parse_targets
from crawlherd.errors import TargetsFileError

BAD_TOML = """\
[[websites]]
name = "shop"
base_url = "https://shop.example"
search_url_template = "https://shop.example/s?q={keywords}"
requires_playwright = "no"

[websites.politeness]
min_delay = "2s"
robots = "maybe"

[[targets]]
website = "shop"
keywords = [
  "a",
  "b",
]
cron = "61 7 * * *"

[[targets]]
website = "nowhere"
keywords = ["c"]
every = "1h"
active = "yes"
"""

BAD_YAML = """\
websites:
  - name: shop
    base_url: https://shop.example
    search_url_template: "https://shop.example/s?q={keywords}"
    requires_playwright: "no"
targets:
  - website: shop
    keywords: [a]
    cron: "61 7 * * *"
"""


def test_every_problem_of_a_toml_file_at_once_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "targets.toml"
    path.write_text(BAD_TOML)
    result = CliRunner().invoke(main, ["targets", "import", "--check", str(path)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: {path}: 5 problem(s), nothing imported:\n"
        "  line 5, websites[0].requires_playwright: must be true or false (without quotes), not 'no'\n"
        "  line 9, websites[0].politeness.robots: Input should be 'obey' or 'ignore'\n"
        "  line 17, targets[0].cron: cron '61 7 * * *': the minute 61 is out of range 0-59\n"
        "  line 23, targets[1].active: must be true or false (without quotes), not 'yes'\n"
        "  line 20, targets[1].website: no website named 'nowhere' in this file or in the database\n"
    )


def test_yaml_says_the_same_with_its_lines() -> None:
    with pytest.raises(TargetsFileError) as info:
        parse_targets(BAD_YAML, path="t.yaml")
    assert info.value.problems == [
        ("line 5, websites[0].requires_playwright", "must be true or false (without quotes), not 'no'"),
        ("line 9, targets[0].cron", "cron '61 7 * * *': the minute 61 is out of range 0-59"),
    ]


def test_broken_toml_names_its_line() -> None:
    with pytest.raises(TargetsFileError) as info:
        parse_targets('[[targets]]\nwebsite = "x"\nkeywords = ["a"\nevery = "1h"\n', path="t.toml")
    assert info.value.problems == [("line 4", "not valid TOML: Unclosed array (column 1)")]
