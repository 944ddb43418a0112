"""Hostile input stays bounded (issue 11, point 9): what an attacker who controls a targets file or a
crawled site can send gets a clear error, in bounded time (pytest-timeout) and memory (measured here
with tracemalloc), and the rest of the work goes on."""

from __future__ import annotations

import asyncio
import os
import stat
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlherd import Crawler
from crawlherd.brokers.sqlite import SQLiteBroker
from crawlherd.db.engine import create_engine
from crawlherd.dispatch import targets_reader
from crawlherd.dispatch.targets_file import load_targets_file, parse_targets
from crawlherd.errors import AddressNotAllowedError, PageTooComplexError, TargetsFileError
from crawlherd.extract.handlers import run_extractor
from crawlherd.extract.links import extract_links, extract_links_async
from crawlherd.extract.rules import ExtractionRules, Page
from crawlherd.extract.selectors import OFF_LOOP_CHARS, html_cost
from crawlherd.fetch import FetchLimits, MockFetcher, MockResponse
from crawlherd.fetch.guard import address_allowed, is_public_address, parse_networks
from crawlherd.fetch.robots import RobotsCache
from crawlherd.frontier.sqlite import SQLiteFrontier
from crawlherd.request import Request

MiB = 1024 * 1024


@contextmanager
def peak_memory(limit: int) -> Iterator[None]:
    """Assert that the Python heap grew by less than ``limit`` bytes at its peak inside the block."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, f"peak memory {peak / MiB:.1f} MiB, over {limit / MiB:.0f} MiB"


def refused(call: Callable[[], Any]) -> str:
    with pytest.raises(TargetsFileError) as info:
        call()
    return str(info.value)


# -- targets files ---------------------------------------------------------------------------------

BILLION_LAUGHS = (
    "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
    + "targets: *i\n"
)


@pytest.mark.timeout(20)
def test_yaml_billion_laughs_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    with peak_memory(32 * MiB):
        message = refused(lambda: load_targets_file(path))
    assert "its aliases expand to more than 200,000 values" in message
    assert "billion laughs" in message and "nothing imported" in message


def test_yaml_aliases_within_the_limit_still_work() -> None:
    text = """\
websites:
  - name: shop
    base_url: https://shop.example
    search_url_template: "https://shop.example/search?q={keywords}"
    extraction: {item_selector: article, item_url: "a@href", fields: {title: h2}}
targets:
  - &base {website: shop, keywords: [a], every: 6h}
  - {<<: *base, keywords: [b]}
"""
    spec = parse_targets(text, fmt="yaml")
    assert [t.keywords for t in spec.targets] == [["a"], ["b"]]


@pytest.mark.timeout(20)
def test_fifty_megabyte_targets_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("w") as fh:
        fh.write("targets:\n")
        line = "  - {website: shop, keywords: [k], every: 6h}\n"
        fh.write(line * (50 * MiB // len(line)))
    with peak_memory(24 * MiB):
        message = refused(lambda: load_targets_file(path))
    assert "over the 8.0 MiB limit for a targets file" in message
    assert "split it into several files" in message


@pytest.mark.timeout(20)
def test_large_text_is_refused_before_parsing() -> None:
    message = refused(lambda: parse_targets("x = 1\n" * (2 * MiB), fmt="toml", max_bytes=MiB))
    assert "over the 1.0 MiB limit" in message


def test_yaml_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old code ran ``yaml.safe_load`` and then ``yaml.compose`` on the same text."""
    calls: list[str] = []
    real_init = targets_reader.BoundedLoader.__init__

    def counting_init(self: Any, stream: str) -> None:
        calls.append("load")
        real_init(self, stream)

    monkeypatch.setattr(targets_reader.BoundedLoader, "__init__", counting_init)
    monkeypatch.setattr(yaml, "safe_load", lambda *a, **k: pytest.fail("parsed a second time"))
    monkeypatch.setattr(yaml, "compose", lambda *a, **k: pytest.fail("parsed a second time"))
    message = refused(lambda: parse_targets("targets:\n  - website: nowhere\n", fmt="yaml"))
    assert "line 2" in message
    assert calls == ["load"]


DEEP = 100_000


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("fmt", "text", "where"),
    [
        ("yaml", "[" * DEEP + "]" * DEEP, "'[' and '{' opened 65 deep"),
        ("yaml", "{a: " * DEEP + "1" + "}" * DEEP, "'[' and '{' opened 65 deep"),
        # block nesting costs its indentation: 3,000 levels are already 4.5 MB of spaces
        ("yaml", "".join(" " * i + "a:\n" for i in range(3_000)) + " " * 3_000 + "b: 1\n", "line 64"),
        ("yaml", "".join(" " * i + "-\n" for i in range(3_000)) + " " * 3_000 + "- 1\n", "line 65"),
        ("toml", "a = " + "[" * DEEP + "]" * DEEP, "nested deeper than 64 levels"),
        ("toml", "a = " + "{b = " * DEEP + "1" + "}" * DEEP, "nested deeper than 64 levels"),
        ("toml", "".join(f"[{'.'.join(['t'] * 70)}]\n"), "nested deeper than 64 levels"),
    ],
    ids=[
        "yaml-flow-lists",
        "yaml-flow-maps",
        "yaml-block-maps",
        "yaml-block-lists",
        "toml-arrays",
        "toml-inline-tables",
        "toml-dotted-table",
    ],
)
def test_deep_nesting_is_refused_without_recursion_error(fmt: str, text: str, where: str) -> None:
    with peak_memory(256 * MiB):
        message = refused(lambda: parse_targets(text, fmt=fmt))  # type: ignore[arg-type]
    assert "refused: " in message and "nested deeper than 64 levels" in message
    assert where in message
    assert "RecursionError" not in message


# -- HTML pages ------------------------------------------------------------------------------------

NESTED_DIVS = "<html><body><a href='/before'>b</a>" + "<div>" * 150_000 + "<a href='/in'>x</a>" + "</div>" * 150_000


@pytest.mark.timeout(120)  # a hang guard: ~2 s alone, ten times that on a loaded machine
def test_150000_nested_divs_are_refused_before_parsing() -> None:
    with peak_memory(64 * MiB):
        with pytest.raises(PageTooComplexError, match="nests elements more than 1024 deep; refused before parsing"):
            extract_links(NESTED_DIVS, "http://site.example/")
        rules = ExtractionRules.from_mapping(
            "site", {"item_selector": "div", "fields": {"t": "a"}, "next_link": "a[rel=next]"}
        )
        with pytest.raises(PageTooComplexError):
            rules.extract(NESTED_DIVS, "http://site.example/")
        with pytest.raises(PageTooComplexError):
            rules.find_next(NESTED_DIVS, "http://site.example/")


def test_parse_budget_counts_work_and_spares_ordinary_pages() -> None:
    html_cost("<ul>" + "<li><p>item" * 50_000 + "</ul>")  # implied end tags: flat, not 100,000 deep
    html_cost("<script>" + "<div>" * 5_000 + "</script><!-- " + "<div>" * 5_000 + " -->")  # not markup
    html_cost("<div>" * 1_000 + "</div>" * 1_000)
    with pytest.raises(PageTooComplexError, match="over the budget of 20,000,000"):
        html_cost(("<div>" * 1_000 + "</div>" * 1_000) * 50)


@pytest.mark.timeout(60)
async def test_hostile_page_does_not_stop_the_crawl() -> None:
    """One page of 150,000 nested divs on a site: its links are not followed (logged), every other
    page is crawled, and the event loop keeps turning while large pages are parsed."""

    def answer(request: Request) -> MockResponse:
        path = request.url.split("/", 3)[3]
        if path == "robots.txt":
            return MockResponse(404)
        if path == "":
            body = "<a href='/evil'>e</a>" + "".join(f"<a href='/p{i}'>p</a>" for i in range(5))
        elif path == "evil":
            body = NESTED_DIVS
        else:
            body = "<p>leaf</p>"
        return MockResponse(200, body, content_type="text/html")

    fetcher = MockFetcher(answer, FetchLimits(user_agent="t", max_body_size=8 * MiB))
    async with Crawler(fetcher=fetcher) as crawler:
        results = await crawler.crawl(["http://site.example/"], max_pages=50, max_depth=2, delay=0, stream=False)
    urls = sorted(r.url for r in results)
    assert urls == ["http://site.example/", "http://site.example/evil"] + [
        f"http://site.example/p{i}" for i in range(5)
    ]
    assert all(r.success for r in results)


@pytest.mark.timeout(60)
async def test_large_pages_are_parsed_off_the_event_loop() -> None:
    page = "<div>" * 900 + "".join(f"<a href='/l{i}'>l</a>" for i in range(20_000)) + "</div>" * 900
    assert len(page) > OFF_LOOP_CHARS
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    links = await extract_links_async(page, "http://site.example/")
    rules = ExtractionRules.from_mapping("site", {"item_selector": "a", "item_url": "@href", "fields": {"t": "@href"}})
    result = await run_extractor(rules, Page(url="http://site.example/", html=page, website="site"))
    done.set()
    await task
    assert len(links) == 20_000 and len(result.items) == 20_000
    assert ticks - before > 2, "the event loop did not turn while the pages were parsed"


# -- charsets --------------------------------------------------------------------------------------


async def test_robots_txt_with_a_bogus_charset_is_read_as_utf8() -> None:
    fetcher = MockFetcher(
        lambda request: MockResponse(
            200, b"User-agent: *\nDisallow: /private\n", content_type="text/plain; charset=bogus"
        ),
        FetchLimits(user_agent="t"),
    )
    robots = RobotsCache(fetcher)
    assert await robots.allowed("http://site.example/page")
    assert not await robots.allowed("http://site.example/private/x")


async def test_robots_txt_that_cannot_be_parsed_sets_no_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    from crawlherd.fetch import robots as robots_module

    def explode(text: str) -> None:
        raise ValueError("hostile")

    monkeypatch.setattr(robots_module.Protego, "parse", explode)
    fetcher = MockFetcher(
        lambda request: MockResponse(200, b"x", content_type="text/plain"), FetchLimits(user_agent="t")
    )
    robots = RobotsCache(fetcher)
    assert await robots.allowed("http://site.example/a")
    assert await robots.allowed("http://site.example/b")
    assert fetcher.urls == ["http://site.example/robots.txt"]


async def test_page_with_a_bogus_charset_is_crawled() -> None:
    fetcher = MockFetcher(
        lambda request: MockResponse(
            200, "<a href='/x'>caf\u00e9</a>".encode(), content_type="text/html; charset=bogus"
        ),
        FetchLimits(user_agent="t"),
    )
    async with Crawler(fetcher=fetcher) as crawler:
        results = await crawler.crawl(["http://site.example/"], max_pages=5, max_depth=1, delay=0, stream=False)
    assert {r.url for r in results} == {"http://site.example/", "http://site.example/x"}
    assert all(r.success for r in results)
    assert "caf\u00e9" in results[0].text


# -- the address guard -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::a00:1",  # IPv4-compatible 10.0.0.1
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:169.254.169.254",  # IPv4-mapped cloud metadata
        "64:ff9b::7f00:1",  # NAT64 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 169.254.169.254
        "64:ff9b:1::808:808",  # local-use NAT64: never global
        "2002:7f00:1::1",  # 6to4 127.0.0.1
        "2002:c0a8:101::1",  # 6to4 192.168.1.1
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
        "::1",
        "::",
    ],
)
def test_guard_refuses_ipv6_forms_of_private_addresses(address: str) -> None:
    assert not is_public_address(address)
    assert not address_allowed(address)


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8", "2606:4700::1111"])
def test_guard_lets_ipv6_forms_of_public_addresses_through(address: str) -> None:
    assert is_public_address(address)


def test_guard_allowed_networks_cover_the_embedded_address() -> None:
    assert address_allowed("::7f00:1", parse_networks(["127.0.0.1/32"]))


# -- files readable by their owner only ------------------------------------------------------------


def owner_only(path: Path) -> None:
    mode = stat.S_IMODE(os.stat(path).st_mode)
    assert mode == 0o600, f"{path.name} has mode {oct(mode)}"


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("open_umask")
async def test_sqlite_broker_files_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "broker.db"
    async with SQLiteBroker(path) as broker:
        await broker.publish(b"{}", key="k")
        for suffix in ("", "-wal", "-shm"):
            owner_only(Path(f"{path}{suffix}"))


@pytest.mark.usefixtures("open_umask")
async def test_sqlite_frontier_files_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "frontier.db"
    async with SQLiteFrontier(path) as frontier:
        await frontier.enqueue_request(Request("http://site.example/"))
        for suffix in ("", "-wal", "-shm"):
            owner_only(Path(f"{path}{suffix}"))


@pytest.mark.usefixtures("open_umask")
async def test_config_db_files_are_owner_only(tmp_path: Path) -> None:
    from sqlalchemy import text

    path = tmp_path / "config.db"
    engine = create_engine(f"sqlite:///{path}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
            await conn.execute(text("INSERT INTO t VALUES (1)"))
        for suffix in ("", "-wal", "-shm"):
            owner_only(Path(f"{path}{suffix}"))
    finally:
        await engine.dispose()


@pytest.mark.parametrize("host", ["[::7f00:1]", "[64:ff9b::a9fe:a9fe]", "[::ffff:10.0.0.1]", "[2002:c0a8:101::1]"])
async def test_fetch_of_an_ipv6_literal_private_address_is_refused(host: str) -> None:
    fetcher = MockFetcher(lambda request: MockResponse(200, b"secret"), FetchLimits(user_agent="t"))
    with pytest.raises(AddressNotAllowedError, match="private/loopback/link-local"):
        await fetcher.fetch(Request(f"http://{host}/latest/meta-data/"))
    assert fetcher.urls == []
