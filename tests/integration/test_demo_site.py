"""The demo site over real HTTP on loopback: every page style, crawled with plain aiohttp and the
extraction rules / pagination from the demo targets."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from crawlherd.demo import DemoSite
from crawlherd.demo.targets import demo_targets, expected_results
from crawlherd.extract.pagination import Pagination
from crawlherd.extract.rules import ExtractionRules
from tests.support import forkserver
from tests.support.demo import first_search_urls


@pytest.fixture
async def site() -> AsyncIterator[DemoSite]:
    async with DemoSite(seed=42, throttle_every=3, retry_after=2) as demo:
        yield demo
    assert demo._runner is None


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, str], str]:
    async with http.get(url, allow_redirects=False) as response:
        return response.status, dict(response.headers), await response.text()


def _website(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(w for w in doc["websites"] if w["name"] == name)


async def crawl_search(http: aiohttp.ClientSession, website: dict[str, Any], url: str) -> dict[str, dict[str, Any]]:
    """A tiny crawl loop: pages in order, 429 retried once, pagination by the website's settings."""
    rules = ExtractionRules.from_mapping(website["name"], website["extraction"])
    pagination = Pagination.from_table(website["pagination"], website=website["name"])
    found: dict[str, dict[str, Any]] = {}
    pages = 0
    next_url: str | None = pagination.first_url(url)
    while next_url is not None:
        status, _, body = await get(http, next_url)
        if status == 429:
            status, _, body = await get(http, next_url)
        assert status == 200, next_url
        pages += 1
        result = rules.extract(body, next_url)
        new = [item for item in result.items if item.fingerprint.hex() not in found]
        for item in new:
            fields = dict(item.fields)
            if rules.detail_fields:
                _, _, detail = await get(http, item.url)
                fields.update(rules.extract_detail(detail, item.url))
            found[item.fingerprint.hex()] = {"url": item.url, "fields": fields}
        next_url = pagination.next_url(next_url, pages_fetched=pages, html=body, new_items=len(new))
    return found


async def test_plain_http_crawl_of_demo_targets_matches_the_sites_truth(
    site: DemoSite, http: aiohttp.ClientSession
) -> None:
    doc = demo_targets(site.url)
    expected = expected_results(site, doc)
    crawled: dict[str, dict[str, dict[str, Any]]] = {w["name"]: {} for w in doc["websites"]}
    for name, url in first_search_urls(doc):
        if _website(doc, name)["requires_playwright"]:
            continue
        crawled[name].update(await crawl_search(http, _website(doc, name), url))
    assert crawled["demo-jobs"] == expected["demo-jobs"]
    assert crawled["demo-jobs-browse"] == expected["demo-jobs-browse"]
    assert len(crawled["demo-jobs"]) == site.totals()["unique_jobs"]
    # page_param walks one page past the end (the empty page tells it to stop)
    by_path = site.log.by_path()
    assert by_path["/search"] >= site.totals()["pages"] + site.totals()["searches"]
    assert site.log.count(prefix="/search", status=429) > 0
    detail_paths = {entry.path for entry in site.log if entry.path.startswith("/jobs/")}
    assert len(detail_paths) == len(expected["demo-jobs-browse"])
    assert all(entry.time > 0 for entry in site.log)
    assert json.loads(json.dumps(site.log.as_dicts()))[0] == {
        "time": site.log.entries[0].time,
        "method": "GET",
        "path": "/search",
        "query": "q=python&l=berlin&page=1",
        "status": site.log.entries[0].status,
    }


async def test_page_param_listing_and_the_empty_page_past_the_end(site: DemoSite, http: aiohttp.ClientSession) -> None:
    site.throttle_every = 0
    rules = ExtractionRules.from_mapping("demo-jobs", demo_targets(site.url)["websites"][0]["extraction"])
    last = site.board.page_count("rust", "paris", site.page_size)
    urls: list[str] = []
    for page in range(1, last + 2):
        url = f"{site.url}/search?q=rust&l=paris&page={page}"
        status, _, body = await get(http, url)
        assert status == 200
        urls.extend(item.url for item in rules.extract(body, url).items)
        if page == last + 1:
            assert "No jobs found" in body
            assert rules.extract(body, url).items == []
    assert urls == [item["url"] for item in site.expected_items("rust", "paris")]


async def test_throttled_url_answers_429_once_with_retry_after(site: DemoSite, http: aiohttp.ClientSession) -> None:
    key = next(
        (k, loc, p)
        for k in site.board.keywords
        for loc in site.board.locations
        for p in (1, 2, 3)
        if site.is_throttled(k, loc, p)
    )
    url = f"{site.url}/search?q={key[0]}&l={key[1]}&page={key[2]}"
    status, headers, _ = await get(http, url)
    assert status == 429 and headers["Retry-After"] == "2"
    assert (await get(http, url))[0] == 200
    assert (await get(http, url))[0] == 200
    calm = next(
        (k, loc) for k in site.board.keywords for loc in site.board.locations if not site.is_throttled(k, loc, 1)
    )
    assert (await get(http, f"{site.url}/search?q={calm[0]}&l={calm[1]}&page=1"))[0] == 200


async def test_js_listing_shows_nothing_to_plain_http_but_its_api_has_the_jobs(
    site: DemoSite, http: aiohttp.ClientSession
) -> None:
    rules = ExtractionRules.from_mapping("demo-jobs-js", _website(demo_targets(site.url), "demo-jobs-js")["extraction"])
    url = f"{site.url}/js/search?q=data&l=london"
    status, _, body = await get(http, url)
    assert status == 200 and "<script>" in body
    assert rules.extract(body, url).items == []
    status, headers, api = await get(http, f"{site.url}/api/jobs?q=data&l=london")
    data = json.loads(api)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert [(i["id"], i["title"]) for i in data["items"]] == [
        (i["id"], i["title"]) for i in site.expected_items("data", "london")
    ]


async def test_detail_pages_robots_and_errors(site: DemoSite, http: aiohttp.ClientSession) -> None:
    job = site.board.jobs[3]
    status, _, body = await get(http, site.job_url(job))
    rules = ExtractionRules.from_mapping(
        "d", {"item_selector": "article", "detail_fields": {k: f".{k}" for k in site.expected_detail(job.id)}}
    )
    assert status == 200 and rules.extract_detail(body, site.job_url(job)) == site.expected_detail(job.id)
    assert (await get(http, f"{site.url}/jobs/1"))[0] == 404
    assert (await get(http, f"{site.url}/jobs/abc"))[0] == 404
    assert (await get(http, f"{site.url}/fail/search?q=python&l=berlin"))[0] == 500
    assert (await get(http, f"{site.url}/search?q=python&l=berlin&page=x"))[0] == 400
    status, _, robots = await get(http, f"{site.url}/robots.txt")
    assert status == 200 and "Disallow: /private/" in robots
    status, _, home = await get(http, f"{site.url}/")
    assert status == 200 and home.count("/browse/") == site.totals()["searches"]
    assert site.log.by_path()["/fail/search"] == 1
    assert site.log.count(status=404) == 2


async def test_stop_is_idempotent_and_frees_the_port() -> None:
    site = DemoSite()
    url = await site.start()
    with pytest.raises(RuntimeError, match="already started"):
        await site.start()
    await site.stop()
    await site.stop()
    port = int(url.rsplit(":", 1)[1])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_module_serves_from_the_command_line(http: aiohttp.ClientSession) -> None:
    port = _free_port()
    proc = await forkserver.exec_python(  # forked off the fork server (tests/support/forkserver.py)
        sys.executable,
        "-m",
        "crawlherd.demo",
        "--port",
        str(port),
        "--seed",
        "9",
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        assert f"http://127.0.0.1:{port}" in first.decode()
        info = json.loads(await asyncio.wait_for(proc.stdout.readline(), timeout=5))
        assert info["unique_jobs"] == DemoSite(seed=9).totals()["unique_jobs"]
        status, _, _ = await get(http, f"http://127.0.0.1:{port}/robots.txt")
        assert status == 200
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), timeout=10) == 0
