"""Crawl-engine throughput: the same 5,000 local pages (10-20 KB), served from memory by a small
HTTP/1.1 keep-alive server in its own process on loopback, fetched at concurrency 64 by

- ``raw``: a bare aiohttp loop guarded by a semaphore (the practical limit, the baseline);
- ``crawlherd``: ``Crawler.arun_many(stream=True)`` with a SemaphoreDispatcher(64), a RateLimiter
  (delays 0) and a CrawlerMonitor attached;
- ``scrapy`` (only with ``--only scrapy``): CONCURRENT_REQUESTS=64, no delays.

Each client runs in its own subprocess (so peak RSS is its own), on the asyncio loop, uvloop, or
both (``--loop``); rounds interleave every (loop, client) pair, and the ratio is taken per loop
against the raw client on the same loop. The server is the same for every client: a raw-asyncio
server (on uvloop when installed) answering from a dict of prebuilt responses, so it costs little
and is not what is measured.

    .venv/bin/python bench/crawl.py                 # raw and crawlherd, both loops, 3 rounds, median
    .venv/bin/python bench/crawl.py --only crawlherd --loop asyncio --profile   # cProfile of one client
    .venv/bin/python bench/crawl.py --base-src /work/main/src   # adds crawlherd@base: another tree's code
    BENCH_PYSPY=/tmp/spy .venv/bin/python bench/crawl.py --rounds 1   # py-spy of each client: /tmp/spy.KIND.LOOP

``--hosts N`` (see bench/crawl_board.py): a job board on N loopback hosts followed by links -- the
issue's ``crawlherd crawl`` row -- against raw aiohttp fetching the same URLs under the same limits:

    .venv/bin/python bench/crawl.py --hosts 20 --rounds 3        # raw and cli, uvloop, pages/s at the server
    .venv/bin/python bench/crawl.py --hosts 20 --only cli --profile cprofile
    .venv/bin/python bench/crawl.py --hosts 20 --engine --base-src DIR   # the engine's CPU/page, no network
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

PAGES = 5000
CONCURRENCY = 64
LOOPS = ("asyncio", "uvloop")


# -- the site (served by its own process) ---------------------------------------------------------


def make_pages(pages: int) -> dict[bytes, bytes]:
    """Path -> the whole HTTP response (headers and body), built once."""
    rng = random.Random(42)
    words = ["crawl", "herd", "polite", "frontier", "lease", "host", "delay", "page", "link", "fetch"]
    out: dict[bytes, bytes] = {}
    for i in range(pages):
        size = rng.randint(10_000, 20_000)
        head = f"<!doctype html><html><head><title>page {i}</title></head><body><h1>page {i}</h1>\n"
        links = "".join(f'<a href="/p{(i * 7 + k) % pages}.html">next {k}</a>\n' for k in range(10))
        filler_len = max(0, size - len(head) - len(links) - 20)
        filler = " ".join(rng.choice(words) for _ in range(filler_len // 6 + 1))[:filler_len]
        body = f"{head}{links}<p>{filler}</p></body></html>".encode()
        out[f"/p{i}.html".encode()] = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
            b"Connection: keep-alive\r\n\r\n%s" % (len(body), body)
        )
    return out


_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nnot found"


class _SiteProtocol(asyncio.Protocol):
    """HTTP/1.1 GET with keep-alive (and pipelining): answers from the prebuilt responses."""

    def __init__(self, pages: dict[bytes, bytes]) -> None:
        self.pages = pages
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def answer(self, path: bytes) -> bytes:
        """The whole response to a GET of ``path`` (bench/crawl_board.py's server counts them too)."""
        return self.pages.get(path, _NOT_FOUND)

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        assert self.transport is not None
        while (end := buf.find(b"\r\n\r\n")) >= 0:
            line = buf[: buf.find(b"\r\n")]
            parts = line.split(b" ")
            path = parts[1] if len(parts) > 2 else b""
            self.transport.write(self.answer(path))
            buf = buf[end + 4 :]
        self.buf = buf


def serve(port: int, pages: int) -> None:
    if importlib.util.find_spec("uvloop") is not None:
        import uvloop

        uvloop.install()
    site = make_pages(pages)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _SiteProtocol(site), "127.0.0.1", port, backlog=1024)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(pages: int) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    cmd = [sys.executable, __file__, "--serve", str(port), "--pages", str(pages)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        sys.exit("the page server did not start")
    return proc, port


# -- clients (each runs in its own process) --------------------------------------------------------


async def run_raw(urls: list[str]) -> int:
    import aiohttp

    sem = asyncio.Semaphore(CONCURRENCY)
    ok = 0

    async with aiohttp.ClientSession() as session:

        async def one(url: str) -> None:
            nonlocal ok
            async with sem, session.get(url) as resp:
                await resp.read()
                if resp.status == 200:
                    ok += 1

        await asyncio.gather(*(one(u) for u in urls))
    return ok


async def run_crawlherd(urls: list[str]) -> int:
    from crawlherd import Crawler, CrawlerMonitor, RateLimiter, SemaphoreDispatcher

    dispatcher = SemaphoreDispatcher(
        CONCURRENCY,
        rate_limiter=RateLimiter(base_delay=(0.0, 0.0)),
        monitor=CrawlerMonitor(enable_ui=False),
    )
    ok = 0
    async with Crawler(allow_private_addresses=True) as crawler:
        results = await crawler.arun_many(urls, dispatcher=dispatcher, stream=True)
        async with results:
            async for result in results:
                if result.success:
                    ok += 1
    assert dispatcher.monitor is not None
    stats = dispatcher.monitor.get_statistics()
    assert stats["completed"] == ok, stats
    return ok


def run_scrapy(urls: list[str]) -> int:
    import scrapy
    from scrapy.crawler import CrawlerProcess

    counter = {"ok": 0}

    class Bench(scrapy.Spider):  # type: ignore[misc]
        name = "bench"

        async def start(self):  # type: ignore[no-untyped-def]  # Scrapy >= 2.13
            for u in urls:
                yield scrapy.Request(u, dont_filter=True)

        def parse(self, response):  # type: ignore[no-untyped-def]
            if response.status == 200:
                counter["ok"] += 1
            return None

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": CONCURRENCY,
            "CONCURRENT_REQUESTS_PER_DOMAIN": CONCURRENCY,
            "DOWNLOAD_DELAY": 0,
            "AUTOTHROTTLE_ENABLED": False,
            "ROBOTSTXT_OBEY": False,
            "LOG_LEVEL": os.environ.get("BENCH_SCRAPY_LOG", "ERROR"),
            "TELNETCONSOLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "RETRY_ENABLED": False,
        }
    )
    process.crawl(Bench)
    process.start()
    return counter["ok"]


def _runner(loop: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    if loop == "uvloop":
        import uvloop

        return uvloop.run
    return asyncio.run


def client(kind: str, loop: str, base: str, pages: int, profile: str | None) -> None:
    urls = [f"{base}/p{i}.html" for i in range(pages)]
    # Imports are not part of the measurement.
    if kind == "scrapy":
        import scrapy.crawler  # noqa: F401
    else:
        import aiohttp  # noqa: F401

        import crawlherd.crawler
        import crawlherd.crawler.concurrency
        import crawlherd.fetch.http  # noqa: F401
    run = _runner(loop)
    start = time.perf_counter()
    cpu0 = time.process_time()
    if kind == "scrapy":
        ok = run_scrapy(urls)
    elif profile == "cprofile":
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        ok = run(run_crawlherd(urls) if kind == "crawlherd" else run_raw(urls))
        prof.disable()
        only = os.environ.get("BENCH_PROFILE_FILTER", "")  # a regex of file/function names to keep
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(only, 45)
    elif profile == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        ok = run(run_crawlherd(urls) if kind == "crawlherd" else run_raw(urls))
        profiler.stop()
        sys.stderr.write(profiler.output_text(unicode=False, color=False, show_all=False))
    else:
        ok = run(run_crawlherd(urls) if kind == "crawlherd" else run_raw(urls))
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"kind": kind, "ok": ok, "seconds": seconds, "cpu": cpu, "rss": rss}))


# -- driver ----------------------------------------------------------------------------------------


def measure(
    kind: str, loop: str, base: str, pages: int, profile: str | None = None, base_src: str | None = None
) -> dict[str, float]:
    env = None
    if kind == "crawlherd@base":  # crawlherd from another tree's src, first on the path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [base_src, os.environ.get("PYTHONPATH")]))}
    client_kind = kind.partition("@")[0]
    cmd = [sys.executable, __file__, "--client", client_kind, "--loop", loop, "--base", base, "--pages", str(pages)]
    if profile:
        cmd += ["--profile", profile]
    if spy := os.environ.get("BENCH_PYSPY"):  # BENCH_PYSPY=FILE: py-spy's samples of each client (collapsed)
        cmd = ["py-spy", "record", "-r", "400", "-f", "raw", "-o", f"{spy}.{kind}.{loop}", "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if profile:
        sys.stderr.write(out.stderr)
    if out.returncode != 0:
        sys.exit(f"{kind} client ({loop}) failed:\n{out.stderr[-3000:]}")
    data: dict[str, float] = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    if data["ok"] != pages:
        sys.exit(f"{kind} ({loop}): only {data['ok']} of {pages} pages fetched")
    return data


def main() -> None:
    if "--hosts" in sys.argv:  # the job board on many hosts: its own module
        import importlib.util as iu
        from pathlib import Path

        spec = iu.spec_from_file_location("bench_crawl_board", Path(__file__).with_name("crawl_board.py"))
        assert spec is not None and spec.loader is not None
        board = iu.module_from_spec(spec)
        spec.loader.exec_module(board)
        board.main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=PAGES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["raw", "crawlherd", "scrapy"], action="append")
    parser.add_argument("--loop", choices=[*LOOPS, "both"], default="both")
    parser.add_argument("--profile", choices=["cprofile", "pyinstrument"], help="profile the client (one round)")
    parser.add_argument("--base-src", help="also run crawlherd@base from this src (another checkout's) in every round")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.pages)
        return
    if args.client:
        client(args.client, args.loop, args.base, args.pages, args.profile)
        return
    kinds = (args.only or ["raw", "crawlherd"]) + (["crawlherd@base"] if args.base_src else [])
    loops = list(LOOPS) if args.loop == "both" else [args.loop]
    if "uvloop" in loops and importlib.util.find_spec("uvloop") is None:
        sys.exit("uvloop is not installed: pip install 'crawlherd[uvloop]' (or pass --loop asyncio)")
    rounds = 1 if args.profile else args.rounds
    server, port = start_server(args.pages)
    base = f"http://127.0.0.1:{port}"
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(lp, k): [] for lp in loops for k in kinds}
    try:
        measure("raw", loops[0], base, min(args.pages, 500))  # warm up the server
        for _ in range(rounds):
            for lp in loops:
                for kind in kinds:
                    if kind == "scrapy" and (runs[(lp, kind)] or lp != "asyncio"):
                        continue  # one Scrapy round, on its own reactor: it is far behind
                    runs[(lp, kind)].append(measure(kind, lp, base, args.pages, args.profile, args.base_src))
    finally:
        server.terminate()
        server.wait(10)
    print(f"{args.pages} pages of 10-20 KB from a loopback server process, concurrency {CONCURRENCY}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; median of {rounds} interleaved rounds")
    print(f"{'loop':<9}{'client':<16}{'pages/s':>10}{'best':>8}{'CPU us/page':>13}{'peak RSS MiB':>14}"
          f"{'vs raw':>9}{'best':>7}{'CPU/raw':>9}")
    for (lp, kind), rs in runs.items():
        if not rs:
            continue
        med = statistics.median(args.pages / r["seconds"] for r in rs)
        best = max(args.pages / r["seconds"] for r in rs)
        raw = runs.get((lp, "raw"))
        ratio = best_ratio = "-"
        if raw:
            ratio = f"{med / statistics.median(args.pages / r['seconds'] for r in raw):.2f}x"
            best_ratio = f"{best / max(args.pages / r['seconds'] for r in raw):.2f}x"
        cpu = statistics.median(r["cpu"] for r in rs) / args.pages * 1e6
        rss = max(r["rss"] for r in rs) / 2**20
        pairs = [r["cpu"] / w["cpu"] for r, w in zip(rs, raw or [], strict=False)]  # round by round
        cpu_ratio = f"{statistics.median(pairs):.2f}x" if pairs else "-"
        print(f"{lp:<9}{kind:<16}{med:>10.0f}{best:>8.0f}{cpu:>13.0f}{rss:>14.0f}{ratio:>9}{best_ratio:>7}"
              f"{cpu_ratio:>9}")
    print("pages/s and CPU: medians; 'best': the fastest round of each client (less sensitive to other load);")
    print("CPU/raw: the median of each round's CPU per page over raw's in the same round")


if __name__ == "__main__":
    main()
