"""Targets files: the examples parse; a bad file is refused whole with every problem listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlherd.dispatch.targets_file import load_targets_file, parse_targets
from crawlherd.errors import TargetsFileError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("name", ["targets.toml", "targets.yaml"])
def test_examples_parse(name: str) -> None:
    spec = load_targets_file(EXAMPLES / name)
    assert spec.websites and spec.targets
    assert spec.websites[0].name == "demo-jobs"


def test_toml_example_contents() -> None:
    spec = load_targets_file(EXAMPLES / "targets.toml")
    first = spec.targets[0]
    assert first.every == 6 * 3600 and first.jitter == 600 and first.misfire == "backfill"
    assert spec.websites[0].politeness.min_delay == 0.2
    assert spec.websites[1].pagination.type == "next_link"


BAD_YAML = """\
websites:
  - name: good-site
    base_url: https://a.example
    search_url_template: "https://a.example/?q={keywords}"
  - name: bad site
    base_url: ftp://x
    search_url_template: "https://x/{kw}"
    pagination: {type: next_link}
    politeness: {max_concurrency: 0, robots: sometimes}
    colour: blue
targets:
  - website: nope
    keywords: []
    every: 1h
    cron: "* * * *"
    misfire: later
  - website: good-site
    keywords: [python]
    every: 10m
    jitter: 1h
  - website: good-site
    keywords: [python]
    cron: "0 7 * * *"
    timezone: Europe/Atlantis
"""


def test_bad_yaml_lists_every_problem_with_line_and_field() -> None:
    with pytest.raises(TargetsFileError) as info:
        parse_targets(BAD_YAML, path="bad.yaml")
    problems = info.value.problems
    text = "\n".join(f"{where}: {msg}" for where, msg in problems)
    expected = [
        ("line 5, websites[1].name", "letters, digits"),
        ("line 6, websites[1].base_url", "http"),
        ("line 7, websites[1].search_url_template", "{kw}"),
        ("line 8, websites[1].pagination", "selector"),
        ("line 9, websites[1].politeness.max_concurrency", "greater than or equal to 1"),
        ("line 9, websites[1].politeness.robots", "'obey' or 'ignore'"),
        ("line 10, websites[1].colour", "unknown field"),
        ("line 12, targets[0].website", "no website named 'nope'"),
        ("line 13, targets[0].keywords", "at least 1"),
        ("line 15, targets[0].cron", "5 fields"),
        ("line 16, targets[0].misfire", "'skip', 'latest' or 'backfill'"),
        ("line 12, targets[0]", "exactly one of 'every'"),
        ("line 17, targets[1]", "jitter"),
        ("line 24, targets[2].timezone", "unknown time zone"),
        ("line 21, targets[2]", "already defined by targets[1]"),
    ]
    for where, fragment in expected:
        assert any(w == where and fragment in m for w, m in problems), f"missing {where}: {fragment}\n{text}"
    assert len(problems) == len(expected), text
    assert str(info.value).startswith("bad.yaml: 15 problem(s), nothing imported:")


def test_bad_toml_reports_keys_and_syntax_errors() -> None:
    with pytest.raises(TargetsFileError) as info:
        parse_targets(
            '[[websites]]\nname = "a"\n[[targets]]\nwebsite = "a"\nkeywords = ["x"]\nevery = "6x"\n', path="t.toml"
        )
    wheres = [w for w, _ in info.value.problems]
    assert "line 1, websites[0].base_url" in wheres and "line 1, websites[0].search_url_template" in wheres
    assert "line 6, targets[0].every" in wheres
    with pytest.raises(TargetsFileError, match=r"line 2: not valid TOML: "):
        parse_targets("[[websites]]\nname = \n", path="t.toml")
    with pytest.raises(TargetsFileError, match="not valid YAML"):
        parse_targets("websites: [\n", path="t.yaml")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "nothing to import"),
        ("- a\n- b\n", "'websites' and 'targets'"),
        ("websites: {name: x}\n", "must be a list"),
        ("websites: [3]\n", "table/mapping"),
        ("sites: []\n", "unknown section"),
    ],
)
def test_wrong_shapes(text: str, match: str) -> None:
    with pytest.raises(TargetsFileError, match=match):
        parse_targets(text, path="x.yaml")


def test_unreadable_or_wrong_extension(tmp_path: Path) -> None:
    with pytest.raises(TargetsFileError, match="cannot read"):
        load_targets_file(tmp_path / "missing.toml")
    (tmp_path / "t.json").write_text("{}")
    with pytest.raises(TargetsFileError, match=r"\.toml, \.yaml or \.yml"):
        load_targets_file(tmp_path / "t.json")
    (tmp_path / "b.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TargetsFileError, match="cannot read"):
        load_targets_file(tmp_path / "b.toml")


def test_environment_variables_are_expanded_with_their_defaults() -> None:
    text = (EXAMPLES / "targets.toml").read_text()
    default = parse_targets(text, environ={})
    assert default.websites[0].base_url == "http://127.0.0.1:8080"
    moved = parse_targets(text, environ={"DEMO_URL": "http://127.0.0.1:9"})
    assert moved.websites[1].search_url_template == "http://127.0.0.1:9/browse/{keywords}/{location}"


def test_an_unset_variable_without_a_default_is_a_problem_with_its_line() -> None:
    text = 'websites = [{name = "s", base_url = "${SITE}", search_url_template = "https://s.example/?q={keywords}"}]\n'
    with pytest.raises(TargetsFileError) as caught:
        parse_targets(text, environ={})
    assert "line 1, websites[0].base_url: the environment variable SITE is not set " \
           "(write ${SITE:-DEFAULT} to give it a default)" in str(caught.value)
