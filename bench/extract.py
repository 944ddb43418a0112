"""Extraction throughput: crawlherd's declarative rules (selectolax/lexbor) against parsel (Scrapy's
selector library, lxml) doing the same work on the demo site's listing pages, measured in one run.

    .venv/bin/python bench/extract.py [--pages 400] [--repeat 5]

Both sides parse the page, select every card, read four text fields and the item URL, resolve it
and compute the item fingerprint; the results are checked to be identical before timing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

from parsel import Selector

from crawlherd.demo import DemoSite
from crawlherd.demo import pages as demo_pages
from crawlherd.demo.targets import demo_targets
from crawlherd.extract.rules import ExtractionRules
from crawlherd.item import item_fingerprint

BASE = "http://127.0.0.1:8080"


def make_pages(count: int) -> list[tuple[str, str]]:
    site = DemoSite(seed=42, page_size=20)
    searches = site.searches()
    out = []
    for i in range(count):
        keyword, location = searches[i % len(searches)]
        jobs = site.board.page(keyword, location, 1, site.page_size)
        html = demo_pages.document("bench", demo_pages.listing(keyword, location, 1, jobs))
        out.append((f"{BASE}/search?q={keyword}&l={location}&page=1", html))
    return out


def with_rules(pages: list[tuple[str, str]]) -> list[tuple[str, bytes, dict[str, Any]]]:
    rules = ExtractionRules.from_mapping("demo-jobs", demo_targets(BASE)["websites"][0]["extraction"])
    out = []
    for url, html in pages:
        for item in rules.extract(html, url).items:
            out.append((item.url, item.fingerprint, dict(item.fields)))
    return out


def with_parsel(pages: list[tuple[str, str]]) -> list[tuple[str, bytes, dict[str, Any]]]:
    out = []
    for url, html in pages:
        for card in Selector(text=html).css("article.job-card"):
            fields = {
                name: " ".join("".join(card.css(f"{sel} ::text").getall()).split()) or None
                for name, sel in (
                    ("title", "h2.title"),
                    ("company", ".company"),
                    ("location", ".location"),
                    ("salary", ".salary"),
                )
            }
            href = card.css("a.job-link::attr(href)").get()
            if not fields["title"] or not href:
                continue
            item_url = urljoin(url, href)
            out.append((item_url, item_fingerprint("demo-jobs", item_url), fields))
    return out


def best_of(
    fn: Callable[[list[tuple[str, str]]], object], pages: list[tuple[str, str]], repeat: int
) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(pages)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pages = make_pages(args.pages)
    ours, theirs = with_rules(pages), with_parsel(pages)
    assert ours == theirs, "the two extractors disagree"
    items = len(ours)
    rules_best, rules_median = best_of(with_rules, pages, args.repeat)
    parsel_best, parsel_median = best_of(with_parsel, pages, args.repeat)
    print(f"{args.pages} listing pages, {items} items, best of {args.repeat}")
    print(f"  crawlherd rules (selectolax): {items / rules_best:10.0f} items/s  (median {items / rules_median:.0f})")
    print(f"  parsel baseline (lxml):       {items / parsel_best:10.0f} items/s  (median {items / parsel_median:.0f})")
    print(f"  ratio rules / parsel:         {parsel_best / rules_best:10.2f}x")


if __name__ == "__main__":
    main()
