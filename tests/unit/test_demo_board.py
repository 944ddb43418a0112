"""The demo site's data and targets, without serving anything."""

from __future__ import annotations

import tomllib

import pytest
from click.testing import CliRunner

from crawlherd.demo import DemoSite
from crawlherd.demo.__main__ import serve
from crawlherd.demo.board import JobBoard
from crawlherd.demo.log import RequestLog, ServedRequest
from crawlherd.demo.targets import (
    DEMO_WEBSITES,
    demo_targets,
    expected_results,
    iter_searches,
    targets_toml,
    without_browser,
)
from crawlherd.errors import ConfigurationError
from crawlherd.extract.pagination import Pagination
from crawlherd.extract.rules import ExtractionRules
from tests.support.demo import first_search_urls


def test_board_is_deterministic_per_seed() -> None:
    a, b, c = JobBoard(seed=1), JobBoard(seed=1), JobBoard(seed=2)
    assert a.jobs == b.jobs
    assert a.jobs != c.jobs
    assert len({job.id for job in a.jobs}) == len(a.jobs)


def test_search_pages_and_counts() -> None:
    board = JobBoard(seed=7, min_jobs=11, max_jobs=11)
    found = board.search("Python", " Berlin ")
    assert len(found) >= 11  # 11 of its own, plus postings of other keywords that also match python
    assert all("python" in job.keywords and job.location == "berlin" for job in found)
    pages = [board.page("python", "berlin", n, 5) for n in range(1, board.page_count("python", "berlin", 5) + 1)]
    assert [job for page in pages for job in page] == found
    assert board.page("python", "berlin", len(pages) + 1, 5) == []
    assert board.page("python", "berlin", 0, 5) == []
    assert board.search("cobol", "berlin") == []
    shared = [job for job in board.jobs if len(job.keywords) > 1]
    assert shared, "some postings match two keywords, so searches overlap"


def test_totals_count_shared_postings_once() -> None:
    site = DemoSite(seed=3, page_size=10)
    totals = site.totals()
    board = site.board
    assert totals["searches"] == len(board.keywords) * len(board.locations)
    assert totals["unique_jobs"] == len(board.jobs)
    assert totals["results"] == sum(len(job.keywords) for job in board.jobs)
    assert totals["results"] > totals["unique_jobs"]
    assert totals["pages"] == sum(board.page_count(k, loc, 10) for k in board.keywords for loc in board.locations)


def test_throttle_is_deterministic_and_can_be_off() -> None:
    site = DemoSite(seed=5, throttle_every=3)
    keys = [(k, loc, p) for k in site.board.keywords for loc in site.board.locations for p in (1, 2)]
    throttled = [key for key in keys if site.is_throttled(*key)]
    assert throttled and len(throttled) < len(keys)
    assert throttled == [key for key in keys if DemoSite(seed=5, throttle_every=3).is_throttled(*key)]
    assert not any(DemoSite(seed=5, throttle_every=0).is_throttled(*key) for key in keys)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"page_size": 0},
        {"throttle_every": -1},
        {"retry_after": -1},
        {"keywords": []},
        {"keywords": ["a b"]},
        {"min_jobs": 5, "max_jobs": 2},
    ],
)
def test_bad_site_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        DemoSite(**kwargs)  # type: ignore[arg-type]


def test_url_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = DemoSite().url


def test_demo_targets_toml_round_trips_and_rules_are_valid() -> None:
    base = "http://127.0.0.1:8123"
    doc = demo_targets(base)
    assert tomllib.loads(targets_toml(doc)) == doc
    assert [w["name"] for w in doc["websites"]] == list(DEMO_WEBSITES)
    assert [w["requires_playwright"] for w in doc["websites"]] == [False, False, True]
    for website in doc["websites"]:
        ExtractionRules.from_mapping(website["name"], website["extraction"])
        Pagination.from_table(website["pagination"], website=website["name"])
        assert website["search_url_template"].startswith(base)
    urls = first_search_urls(doc)
    assert urls[0] == ("demo-jobs", f"{base}/search?q=python&l=berlin&page=1")
    assert ("demo-jobs-browse", f"{base}/browse/rust/remote") in urls
    assert len(iter_searches(doc)) == 20 + 4 + 4


def test_without_browser_drops_the_browser_websites_and_their_targets() -> None:
    doc = demo_targets("http://127.0.0.1:8123")
    plain = without_browser(doc)
    assert [w["name"] for w in plain["websites"]] == ["demo-jobs", "demo-jobs-browse"]
    assert [t["website"] for t in plain["targets"]] == ["demo-jobs", "demo-jobs-browse"]
    assert tomllib.loads(targets_toml(plain)) == plain
    assert len(doc["websites"]) == 3  # the document given is left as it was


def test_expected_results_dedupe_within_a_website() -> None:
    site = DemoSite(seed=42)
    site._url = "http://127.0.0.1:1"  # only the URL is needed to name the items
    doc = demo_targets(site.url)
    expected = expected_results(site, doc)
    assert len(expected["demo-jobs"]) == site.totals()["unique_jobs"]  # every keyword x location
    browse = expected["demo-jobs-browse"]
    assert all(
        set(entry["fields"]) == {"title", "company", "location", "salary", "description"} for entry in browse.values()
    )
    searches = [(k, loc) for k in ("python", "rust") for loc in ("berlin", "remote")]
    assert len(browse) == site.totals(searches)["unique_jobs"]


def test_request_log_is_bounded() -> None:
    log = RequestLog(max_entries=3)
    for n in range(5):
        log.entries.append(ServedRequest(float(n), "GET", f"/p{n % 2}", "", 200))
    assert len(log) == 3 and [e.time for e in log] == [2.0, 3.0, 4.0]
    assert log.by_path() == {"/p0": 2, "/p1": 1}
    assert log.count(prefix="/p1") == 1
    log.clear()
    assert len(log) == 0


def test_serve_command_refuses_bad_options_without_a_traceback() -> None:
    result = CliRunner().invoke(serve, ["--throttle-every", "-1"])
    assert result.exit_code == 2
    assert "--throttle-every" in result.output and "Traceback" not in result.output
