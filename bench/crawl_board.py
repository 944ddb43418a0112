"""The crawl engine across many hosts (``bench/crawl.py --hosts N`` runs this): a static job board on
``N`` loopback hosts (``127.78.0.1``...; Linux routes all of 127.0.0.0/8 to lo), crawled by following
links, robots.txt obeyed, delay 0, 8 requests in flight per host, 64 in all.

Each host has 5 targets; a target is 5 listing pages (each links its 20 postings, the next listing page
and ``/private``, which robots.txt disallows) and 100 posting pages (each links back to its listing page
and to ``/private``): 525 pages a host, 10,500 on 20 hosts, plus one robots.txt each. Pages are 3-9 KB
of text, prebuilt, served by a raw-asyncio keep-alive server in its own process (on uvloop) that counts
every request per (host, path) and stamps the first and the last.

Clients, each in its own process, rounds interleaved:

- ``raw`` (the baseline): aiohttp fetching the same URLs under the same limits -- per host its robots.txt
  first (parsed with ``urllib.robotparser``, every URL checked, ``/private`` skipped), then its pages
  by 8 workers; a ``Semaphore(64)`` held while a request is out. No link extraction: the URLs are known.
- ``cli``: ``crawlherd crawl <the 100 first listing pages> --allow-private --respect-robots
  --concurrency 64 --per-host 8 --delay 0 --depth 5`` invoked in-process (imports done before the
  clock starts), on uvloop as the CLI's default.

``--engine`` (with ``--base-src``): the engine's own CPU per page, without network or server --
``Crawler.crawl`` of the same board (same seeds, limits, robots.txt, monitor) through a ``MockFetcher``
answering the prebuilt pages -- in its own process, against the other tree's in the same rounds: a
before/after that a loaded machine's swings disturb far less than pages/s.

The figure is pages/s **at the server** (requests served over the time from the first to the last);
every round checks that each page came exactly once, robots.txt once per host, ``/private`` never,
and that the CLI reported 10,500 pages fetched and the 20 disallowed links.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from typing import Any

TARGETS = 5  # per host
LISTING = 5  # listing pages per target
POSTINGS = 20  # per listing page
CONCURRENCY = 64
PER_HOST = 8
ROBOTS = b"User-agent: *\nDisallow: /private\n"
WORDS = ["crawl", "herd", "polite", "frontier", "lease", "host", "delay", "page", "link", "fetch", "job", "pay"]


def host_addresses(n: int) -> list[str]:
    return [f"127.78.0.{i + 1}" for i in range(n)]


def _http(body: bytes, ctype: bytes = b"text/html; charset=utf-8") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s" % (
        ctype,
        len(body),
        body,
    )


def _filler(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(size // 5))[:size]


def board() -> tuple[dict[bytes, bytes], list[str]]:
    """Path -> whole HTTP response (the same on every host), and the page paths of one host."""
    rng = random.Random(24)
    pages: dict[bytes, bytes] = {b"/robots.txt": _http(ROBOTS, b"text/plain")}
    paths: list[str] = []
    for t in range(TARGETS):
        for k in range(1, LISTING + 1):
            posts = range((k - 1) * POSTINGS, k * POSTINGS)
            links = "".join(f'<li><a href="/t{t}/job{j}">posting {j}</a></li>\n' for j in posts)
            nxt = f'<a rel="next" href="/t{t}/list{k + 1}">next</a>' if k < LISTING else ""
            html = (
                f"<!doctype html><html><head><title>target {t} page {k}</title></head><body>"
                f'<a href="/private">apply</a><ul>{links}</ul>{nxt}<p>{_filler(rng, 2000)}</p></body></html>'
            )
            paths.append(f"/t{t}/list{k}")
            pages[paths[-1].encode()] = _http(html.encode())
            for j in posts:
                html = (
                    f"<!doctype html><html><head><title>posting {j}</title></head><body><h1>posting {j}</h1>"
                    f'<a href="/t{t}/list{k}">back</a> <a href="/private">apply</a>'
                    f"<p>{_filler(rng, rng.randint(3000, 9000))}</p></body></html>"
                )
                paths.append(f"/t{t}/job{j}")
                pages[paths[-1].encode()] = _http(html.encode())
    return pages, paths


# -- the server (its own process) -------------------------------------------------------------------


def _site_protocol() -> type[asyncio.Protocol]:
    """bench/crawl.py's keep-alive server protocol (this module also runs as a script of its own)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_crawl", Path(__file__).with_name("crawl.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._SiteProtocol  # type: ignore[no-any-return]


class _Stats:
    """What the board served since the driver last asked: requests per (host, path), first and last time."""

    hits: Counter[tuple[str, str]] = Counter()
    stamps: list[float] = []


def _board_protocol(base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    class Board(base):  # type: ignore[valid-type,misc]
        """The site's protocol on one host, counting what it serves; ``/__stats`` answers the counts."""

        def __init__(self, pages: dict[bytes, bytes], host: str) -> None:
            super().__init__(pages)
            self.host = host

        def answer(self, path: bytes) -> bytes:
            if path == b"/__stats":
                out = json.dumps({"hits": [[h, p, n] for (h, p), n in _Stats.hits.items()], "span": _Stats.stamps})
                _Stats.hits.clear()
                _Stats.stamps.clear()
                return _http(out.encode(), b"application/json")
            now = time.monotonic()
            if _Stats.stamps:
                _Stats.stamps[1] = now
            else:
                _Stats.stamps.extend((now, now))
            _Stats.hits[(self.host, path.decode())] += 1
            return super().answer(path)  # type: ignore[no-any-return]

    return Board


def serve(port: int, hosts: int) -> None:
    import uvloop

    pages, _ = board()
    protocol = _board_protocol(_site_protocol())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        servers = [
            await loop.create_server(lambda a=a: protocol(pages, a), a, port, backlog=1024)  # type: ignore[misc]
            for a in host_addresses(hosts)
        ]
        print("ready", flush=True)
        await asyncio.gather(*(s.serve_forever() for s in servers))

    uvloop.run(main())


def take_stats(port: int) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.78.0.1:{port}/__stats", timeout=30) as resp:
        return json.load(resp)  # type: ignore[no-any-return]


# -- clients (each in its own process) ---------------------------------------------------------------


async def run_raw(hosts: list[str], port: int, paths: list[str]) -> int:
    import urllib.robotparser

    import aiohttp

    sem = asyncio.Semaphore(CONCURRENCY)
    fetched = 0

    async def get(session: aiohttp.ClientSession, url: str) -> bytes:
        nonlocal fetched
        async with sem, session.get(url) as resp:
            body = await resp.read()
            fetched += resp.status == 200
            return body

    async def host(session: aiohttp.ClientSession, addr: str) -> None:
        origin = f"http://{addr}:{port}"
        robots = urllib.robotparser.RobotFileParser()
        robots.parse((await get(session, origin + "/robots.txt")).decode().splitlines())
        todo = [origin + p for p in [*paths, "/private"] if robots.can_fetch("*", origin + p)]

        async def worker() -> None:
            while todo:
                await get(session, todo.pop())

        await asyncio.gather(*(worker() for _ in range(PER_HOST)))

    connector = aiohttp.TCPConnector(limit=CONCURRENCY, limit_per_host=PER_HOST)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(host(session, a) for a in hosts))
    return fetched


def run_cli(hosts: list[str], port: int) -> int:
    from crawlherd.cli import _loop, main

    own = getattr(_loop, "own_the_process", None)  # this client process is the command's own, as
    if own is not None:  # `crawlherd crawl` is (--base-src trees from before it have no such call)
        own()

    seeds = [f"http://{a}:{port}/t{t}/list1" for a in hosts for t in range(TARGETS)]
    argv = [
        "crawl",
        *seeds,
        "--allow-private",
        "--respect-robots",
        "--concurrency",
        str(CONCURRENCY),
        "--per-host",
        str(PER_HOST),
        "--delay",
        "0",
        "--depth",
        str(LISTING),
        "--max-pages",
        "1000000",
        "--loop",
        "uvloop",
        "--json",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main.main(argv, standalone_mode=False)
    stats = json.loads(out.getvalue())
    pages = len(hosts) * TARGETS * LISTING * (POSTINGS + 1)
    assert stats["pages/ok"] == pages and stats["pages/total"] == pages + len(hosts), stats
    return int(stats["pages/ok"])


def run_engine(hosts: list[str]) -> tuple[int, float]:
    """``Crawler.crawl`` of the board through a MockFetcher (``--engine``): pages fetched, CPU seconds."""
    from urllib.parse import urlsplit

    from crawlherd import Crawler, CrawlerRunConfig
    from crawlherd.crawler.concurrency import CrawlerMonitor, RateLimiter, SemaphoreDispatcher
    from crawlherd.fetch import FetchLimits, MockFetcher, MockResponse
    from crawlherd.request import Request

    pages, _ = board()
    bodies = {p.decode(): r.split(b"\r\n\r\n", 1)[1] for p, r in pages.items()}

    def answer(request: Request) -> MockResponse:
        path = urlsplit(request.url).path
        kind = "text/plain" if path == "/robots.txt" else "text/html; charset=utf-8"
        return MockResponse(200, bodies[path], content_type=kind)

    async def crawl() -> int:
        monitor = CrawlerMonitor(enable_ui=False, concurrency=CONCURRENCY)
        dispatcher = SemaphoreDispatcher(CONCURRENCY, rate_limiter=RateLimiter(base_delay=(0.0, 0.0)), monitor=monitor)
        config = CrawlerRunConfig(check_robots_txt=True, concurrency=CONCURRENCY)
        fetcher = MockFetcher(answer, FetchLimits(allow_private_addresses=True))
        seeds = [f"http://{a}:8000/t{t}/list1" for a in hosts for t in range(TARGETS)]
        ok = 0
        async with Crawler(fetcher=fetcher, config=config) as crawler:
            stream = await crawler.crawl(seeds, max_pages=1_000_000, max_depth=LISTING, dispatcher=dispatcher,
                                         delay=0, max_in_flight_per_host=PER_HOST)
            async with stream:
                async for result in stream:
                    ok += result.success
        return ok

    import uvloop

    cpu0 = time.process_time()
    ok = uvloop.run(crawl())
    return ok, time.process_time() - cpu0


def engine_main(hosts: int, rounds: int, base_src: str | None) -> None:
    """``--engine``: the engine's CPU per page without network, this tree and ``--base-src``'s, interleaved."""
    kinds = ["engine"] + (["engine@base"] if base_src else [])
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for kind in kinds:
            env = None
            if kind.endswith("@base"):
                path = os.pathsep.join(filter(None, [base_src, os.environ.get("PYTHONPATH")]))
                env = {**os.environ, "PYTHONPATH": path}
            cmd = [sys.executable, __file__, "--client", "engine", "--hosts", str(hosts), "--port", "0"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            if out.returncode != 0:
                sys.exit(f"{kind} failed:\n{out.stderr[-3000:]}")
            data = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
            want = hosts * TARGETS * LISTING * (POSTINGS + 1)
            if data["ok"] != want:
                sys.exit(f"{kind}: {data['ok']} pages fetched, not {want}")
            cpu[kind].append(data["cpu"] / want * 1e6)
            print(f"  {kind}: {cpu[kind][-1]:.0f} us CPU/page", flush=True)
    print(f"the engine alone (MockFetcher), {hosts} hosts; load average {os.getloadavg()[0]:.1f}; "
          f"median of {rounds} interleaved rounds")
    for kind, each in cpu.items():
        print(f"{kind:<12}{statistics.median(each):>8.0f} us CPU/page  ({', '.join(f'{c:.0f}' for c in each)})")
    if base_src:
        pairs = sorted(c / b for c, b in zip(cpu["engine"], cpu["engine@base"], strict=True))
        print("engine/base per round: " + ", ".join(f"{x:.2f}" for x in pairs))


def client(kind: str, hosts: int, port: int, profile: str | None) -> None:
    if kind == "engine":
        ok, cpu = run_engine(host_addresses(hosts))
        print(json.dumps({"kind": kind, "ok": ok, "cpu": cpu}))
        return
    import aiohttp  # noqa: F401 - imports are not part of the measurement
    import uvloop

    import crawlherd.cli._common
    import crawlherd.cli.crawl
    import crawlherd.crawler
    import crawlherd.crawler.concurrency
    import crawlherd.fetch.http
    import crawlherd.settings  # noqa: F401

    addrs = host_addresses(hosts)
    paths = board()[1] if kind == "raw" else []  # the URLs raw knows: made before the clock, as imports are
    prof = None
    if profile == "cprofile":
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    cpu0 = time.process_time()
    ok = uvloop.run(run_raw(addrs, port, paths)) if kind == "raw" else run_cli(addrs, port)
    cpu = time.process_time() - cpu0
    if prof is not None:
        import pstats

        prof.disable()
        only = os.environ.get("BENCH_PROFILE_FILTER", "")
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(only, 50)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"kind": kind, "ok": ok, "cpu": cpu, "rss": rss}))


# -- driver ----------------------------------------------------------------------------------------


def check(stats: dict[str, Any], hosts: int, kind: str) -> int:
    """The requests served (failing loudly on a page missed or fetched twice, or a robots.txt breach)."""
    _, paths = board()
    hits = {(h, p): n for h, p, n in stats["hits"]}
    want = {(a, p): 1 for a in host_addresses(hosts) for p in [*paths, "/robots.txt"]}
    if hits != want:
        wrong = sorted(
            (k, hits.get(k, 0), want.get(k, 0)) for k in hits.keys() | want.keys() if hits.get(k, 0) != want.get(k, 0)
        )
        sys.exit(f"{kind}: the server saw other requests than one per page ({len(wrong)} wrong: {wrong[:5]})")
    return sum(hits.values())


def measure(kind: str, hosts: int, port: int, profile: str | None, base_src: str | None = None) -> dict[str, float]:
    env = None
    if kind.endswith("@base"):  # the same client on another tree's src (before/after in one run)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [base_src, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, __file__, "--client", kind.removesuffix("@base"), "--hosts", str(hosts), "--port", str(port)]
    if profile:
        cmd += ["--profile", profile]
    if spy := os.environ.get("BENCH_PYSPY"):  # BENCH_PYSPY=FILE: py-spy's samples of the client (collapsed)
        cmd = ["py-spy", "record", "-r", "400", "-f", "raw", "-o", f"{spy}.{kind}", "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if profile:
        sys.stderr.write(out.stderr)
    if out.returncode != 0:
        sys.exit(f"{kind} client failed:\n{out.stderr[-3000:]}")
    data: dict[str, float] = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    stats = take_stats(port)
    served = check(stats, hosts, kind)
    first, last = stats["span"]
    data.update(served=served, seconds=last - first, rate=served / (last - first), cpu_page=data["cpu"] / served)
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["raw", "cli"], action="append")
    parser.add_argument("--profile", choices=["cprofile"], help="profile the client (one round)")
    parser.add_argument("--base-src", help="also run cli@base on this src (another checkout's) in every round")
    parser.add_argument("--engine", action="store_true", help="the engine's CPU per page, no network (MockFetcher)")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.serve:
        serve(args.port, args.hosts)
        return
    if args.client:
        client(args.client, args.hosts, args.port, args.profile)
        return
    if args.engine:
        engine_main(args.hosts, args.rounds, args.base_src)
        return
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--hosts", str(args.hosts), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    if server.stdout.readline().strip() != "ready":
        server.kill()
        sys.exit("the board server did not start")
    kinds = (args.only or ["raw", "cli"]) + (["cli@base"] if args.base_src else [])
    rounds = 1 if args.profile else args.rounds
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    try:
        for _ in range(rounds):
            for kind in kinds:
                runs[kind].append(measure(kind, args.hosts, port, args.profile, args.base_src))
                r = runs[kind][-1]
                print(f"  {kind}: {r['rate']:.0f} pages/s, {r['cpu_page'] * 1e6:.0f} us CPU/page", flush=True)
    finally:
        server.terminate()
        server.wait(10)
    pages = args.hosts * TARGETS * LISTING * (POSTINGS + 1)
    print(
        f"{args.hosts} hosts, {pages} pages + {args.hosts} robots.txt, {PER_HOST} per host, {CONCURRENCY} in "
        f"flight, delay 0; load average {os.getloadavg()[0]:.1f}; median of {rounds} interleaved rounds"
    )
    print(f"{'client':<9}{'pages/s':>10}{'CPU us/page':>13}{'peak RSS MiB':>14}{'vs raw':>8}  pages/s per round")
    raw = statistics.median(r["rate"] for r in runs["raw"]) if runs.get("raw") else None
    for kind, rs in runs.items():
        med = statistics.median(r["rate"] for r in rs)
        each = ", ".join(f"{r['rate']:.0f}" for r in rs)
        cpu = statistics.median(r["cpu_page"] for r in rs) * 1e6
        rss = max(r["rss"] for r in rs) / 2**20
        ratio = f"{med / raw:.2f}x" if raw else "-"
        print(f"{kind:<9}{med:>10.0f}{cpu:>13.0f}{rss:>14.0f}{ratio:>8}  {each}")
    if raw and runs.get("cli") and len(runs["cli"]) == len(runs["raw"]):
        per_round = sorted(c["rate"] / r["rate"] for c, r in zip(runs["cli"], runs["raw"], strict=True))
        print("cli/raw per round: " + ", ".join(f"{x:.2f}" for x in per_round))
        cpu_ratio = statistics.median(r["cpu_page"] for r in runs["raw"]) / statistics.median(
            c["cpu_page"] for c in runs["cli"]
        )
        print(f"raw's CPU per page over the cli's (medians): {cpu_ratio:.2f}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.78.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    main()
