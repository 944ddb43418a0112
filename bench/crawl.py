"""Crawl-engine throughput: the same 5,000 local pages (10-20 KB) from nginx on loopback, fetched at
concurrency 64 by

- ``raw``: a bare aiohttp loop guarded by a semaphore (the practical limit, the baseline);
- ``crawlherd``: ``Crawler.arun_many(stream=True)`` with a SemaphoreDispatcher(64), a RateLimiter
  (delays 0) and a CrawlerMonitor attached;
- ``scrapy``: CONCURRENT_REQUESTS=64, no delays.

Each client runs in its own subprocess (so peak RSS is its own); the script starts a private nginx on
a free loopback port with its own config, and stops it by PID at the end.

    .venv/bin/python bench/crawl.py                # all three, 3 rounds each, median
    .venv/bin/python bench/crawl.py --only crawlherd --profile   # cProfile of the crawlherd client
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PAGES = 5000
CONCURRENCY = 64


# -- the site -------------------------------------------------------------------------------------


def make_site(root: Path, pages: int) -> None:
    rng = random.Random(42)
    words = ["crawl", "herd", "polite", "frontier", "lease", "host", "delay", "page", "link", "fetch"]
    for i in range(pages):
        size = rng.randint(10_000, 20_000)
        head = f"<!doctype html><html><head><title>page {i}</title></head><body><h1>page {i}</h1>\n"
        links = "".join(f'<a href="/p{(i * 7 + k) % pages}.html">next {k}</a>\n' for k in range(10))
        filler_len = max(0, size - len(head) - len(links) - 20)
        filler = " ".join(rng.choice(words) for _ in range(filler_len // 6 + 1))[:filler_len]
        (root / f"p{i}.html").write_text(f"{head}{links}<p>{filler}</p></body></html>")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_nginx(workdir: Path, root: Path) -> tuple[subprocess.Popen[bytes], int]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        sys.exit("nginx is not installed: apt-get install -y nginx-light")
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(
        textwrap.dedent(
            f"""
            worker_processes 1;
            daemon off;
            pid {workdir}/nginx.pid;
            error_log {workdir}/error.log warn;
            events {{ worker_connections 1024; }}
            http {{
                access_log off;
                sendfile on;
                tcp_nopush on;
                keepalive_requests 1000000;
                keepalive_timeout 60;
                client_body_temp_path {workdir}/tmp;
                proxy_temp_path {workdir}/tmp;
                fastcgi_temp_path {workdir}/tmp;
                uwsgi_temp_path {workdir}/tmp;
                scgi_temp_path {workdir}/tmp;
                types {{ text/html html; }}
                server {{
                    listen 127.0.0.1:{port};
                    root {root};
                }}
            }}
            """
        )
    )
    (workdir / "tmp").mkdir(exist_ok=True)
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(workdir)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"nginx did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
    proc.kill()
    sys.exit("nginx did not start listening within 10 s")


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


def worker(kind: str, base: str, pages: int, profile: bool) -> None:
    urls = [f"{base}/p{i}.html" for i in range(pages)]
    # Imports are not part of the measurement.
    if kind == "scrapy":
        import scrapy.crawler  # noqa: F401
    else:
        import aiohttp  # noqa: F401

        import crawlherd.crawler
        import crawlherd.dispatch
        import crawlherd.fetch.http  # noqa: F401
    start = time.perf_counter()
    cpu0 = time.process_time()
    if kind == "scrapy":
        ok = run_scrapy(urls)
    elif profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        ok = asyncio.run(run_crawlherd(urls) if kind == "crawlherd" else run_raw(urls))
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(35)
    else:
        coro = run_crawlherd(urls) if kind == "crawlherd" else run_raw(urls)
        ok = asyncio.run(coro)
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"kind": kind, "ok": ok, "seconds": seconds, "cpu": cpu, "rss": rss}))


# -- driver ----------------------------------------------------------------------------------------


def measure(kind: str, base: str, pages: int, profile: bool = False) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", kind, "--base", base, "--pages", str(pages)]
    if profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if profile:
        sys.stderr.write(out.stderr)
    if out.returncode != 0:
        sys.exit(f"{kind} client failed:\n{out.stderr[-3000:]}")
    data: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if data["ok"] != pages:
        sys.exit(f"{kind}: only {data['ok']} of {pages} pages fetched")
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=PAGES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["raw", "crawlherd", "scrapy"], action="append")
    parser.add_argument("--profile", action="store_true", help="cProfile the client (one round)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.base, args.pages, args.profile)
        return
    kinds = args.only or ["raw", "crawlherd", "scrapy"]
    with tempfile.TemporaryDirectory(prefix="crawlherd-bench-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)  # nginx started as root serves from worker processes running as nobody
        root = workdir / "site"
        root.mkdir()
        make_site(root, args.pages)
        nginx, port = start_nginx(workdir, root)
        base = f"http://127.0.0.1:{port}"
        try:
            measure("raw", base, min(args.pages, 500))  # warm the page cache and nginx
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
            for _ in range(1 if args.profile else args.rounds):
                for kind in kinds:
                    if kind == "scrapy" and runs[kind]:
                        continue  # one Scrapy round is enough: it is far behind
                    runs[kind].append(measure(kind, base, args.pages, args.profile))
        finally:
            nginx.terminate()
            try:
                nginx.wait(10)
            except subprocess.TimeoutExpired:
                nginx.kill()
                nginx.wait()
    print(f"{args.pages} pages of 10-20 KB from nginx on loopback, concurrency {CONCURRENCY}, "
          f"{os.cpu_count()} CPUs; median of {args.rounds} rounds (Scrapy: 1)")
    print(f"{'client':<12}{'pages/s':>10}{'best':>8}{'CPU us/page':>13}{'peak RSS MiB':>14}{'vs raw':>9}{'best':>7}")
    med = {k: statistics.median(args.pages / r["seconds"] for r in v) for k, v in runs.items()}
    best = {k: max(args.pages / r["seconds"] for r in v) for k, v in runs.items()}
    for kind, rs in runs.items():
        cpu = statistics.median(r["cpu"] for r in rs) / args.pages * 1e6
        rss = max(r["rss"] for r in rs) / 2**20
        ratio = f"{med[kind] / med['raw']:.2f}x" if "raw" in med else "-"
        best_ratio = f"{best[kind] / best['raw']:.2f}x" if "raw" in best else "-"
        print(f"{kind:<12}{med[kind]:>10.0f}{best[kind]:>8.0f}{cpu:>13.0f}{rss:>14.0f}{ratio:>9}{best_ratio:>7}")
    print("pages/s and CPU: medians; 'best': the fastest round of each client (less sensitive to other load)")


if __name__ == "__main__":
    main()
