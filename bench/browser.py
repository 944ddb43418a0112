"""What a browser-rendered page costs: the demo site's JavaScript listing through BrowserFetcher
(``networkidle``, and ``domcontentloaded`` + ``wait_for``) against its server-rendered listing over
plain aiohttp, all on loopback in one run; every fetch is checked to yield the expected items.

    .venv/bin/python bench/browser.py [--pages 24] [--max-pages 4]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp

from crawlherd.demo import DemoSite
from crawlherd.demo.targets import demo_targets
from crawlherd.extract.rules import ExtractionRules
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.browser import BrowserFetcher, BrowserOptions
from crawlherd.request import Request


async def timed(label: str, count: int, run: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await run()
    elapsed = time.perf_counter() - start
    print(f"  {label:<44} {count / elapsed:8.1f} pages/s")
    return count / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=24)
    parser.add_argument("--max-pages", type=int, default=4)
    args = parser.parse_args()
    limits = FetchLimits(allow_private_addresses=True)
    async with DemoSite(seed=42, page_size=1000, throttle_every=0) as site:
        rules = ExtractionRules.from_mapping("demo-jobs", demo_targets(site.url)["websites"][0]["extraction"])
        searches = [(k, loc) for k in site.board.keywords for loc in site.board.locations]
        picks = [searches[i % len(searches)] for i in range(args.pages)]

        def check(html: str, url: str, keyword: str, location: str) -> None:
            found = [item.url for item in rules.extract(html, url).items]
            assert found == [e["url"] for e in site.expected_items(keyword, location)], url

        async def plain() -> None:
            sem = asyncio.Semaphore(args.max_pages)
            async with aiohttp.ClientSession() as http:

                async def one(k: str, loc: str) -> None:
                    url = f"{site.url}/search?q={k}&l={loc}&page=1"
                    async with sem, http.get(url) as response:
                        check(await response.text(), url, k, loc)

                await asyncio.gather(*(one(k, loc) for k, loc in picks))

        def browser_run(fetcher: BrowserFetcher) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                async def one(k: str, loc: str) -> None:
                    url = f"{site.url}/js/search?q={k}&l={loc}"
                    response = await fetcher.fetch(Request(url))
                    check(response.text, url, k, loc)

                await asyncio.gather(*(one(k, loc) for k, loc in picks))

            return run

        print(f"{args.pages} listing pages, {args.max_pages} at a time")
        baseline = await timed("plain aiohttp, server-rendered (baseline)", args.pages, plain)
        async with BrowserFetcher(limits, BrowserOptions(max_pages=args.max_pages)) as idle:
            await idle.fetch(Request(f"{site.url}/"))  # launch outside the timing
            networkidle = await timed("BrowserFetcher, networkidle", args.pages, browser_run(idle))
        async with BrowserFetcher(
            limits,
            BrowserOptions(
                max_pages=args.max_pages,
                wait_until="domcontentloaded",
                wait_for="#results[data-state=done]",
            ),
        ) as waiting:
            await waiting.fetch(Request(f"{site.url}/", meta={"wait_for": None}))
            selector = await timed("BrowserFetcher, wait_for selector", args.pages, browser_run(waiting))
        print(f"  browser (networkidle) costs {baseline / networkidle:.0f}x a plain fetch;")
        print(f"  wait_for is {selector / networkidle:.1f}x faster than networkidle")


if __name__ == "__main__":
    asyncio.run(main())
