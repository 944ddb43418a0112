"""Polite throughput over many hosts: hundreds of loopback hosts, each a chain of pages (page k links to
page k+1, and to ``/private``, which its robots.txt disallows), crawled with a per-host delay, robots.txt
obeyed, at concurrency 64. Against the delay-bound ideal: robots.txt and the pages of a host 1 delay
apart, ``(pages - 1 + 2) * delay`` (the issue's formula).

One server process (not the benchmark's) listens on ``--hosts`` addresses ``127.77.x.y`` (Linux routes all
of 127.0.0.0/8 to lo) -- each a distinct host for crawlherd's politeness and address guard -- and stamps
every request it receives (``time.time()``, one clock for the machine's processes). Per round it reports the
client's wall time, the fraction of the ideal, and what the server saw: the smallest gap between two
requests to one host (must never be under the delay), whether robots.txt came once and first per host,
and that no disallowed page was fetched.

Clients, interleaved, each in its own process:

- ``raw``: aiohttp, one task per host sleeping the delay between its requests, a semaphore of 64 held
  only while a request is out: the practical limit of a polite crawl on this machine (the baseline);
- ``crawlherd``: ``Crawler.crawl`` (SemaphoreDispatcher(64) with a RateLimiter and a CrawlerMonitor, as
  the CLI builds it), frontier ``--frontier`` (memory:// by default);
- ``cli``: ``crawlherd crawl URL... --allow-private --respect-robots --concurrency 64`` (the issue's row;
  its wall time is the crawl's own ``elapsed_seconds``, interpreter start not counted);
- ``fleet`` (with ``--workers N``, a ``redis://`` ``--frontier``): N processes each running that same
  ``crawlherd crawl`` (the CLI's command, called in the process once it is started) on the same seeds and
  one Redis frontier -- every page leased by whichever process is free, each host's delay kept across
  them by the frontier's send clock. Its wall time runs from the first process's start of the crawl
  to the last one's end.

    .venv/bin/python bench/many_hosts.py                      # 500 hosts x 10 pages, delay 1 s, 3 rounds
    .venv/bin/python bench/many_hosts.py --hosts 100 --rounds 1 --only crawlherd
    .venv/bin/python bench/many_hosts.py --frontier redis://127.0.0.1:6379/0 --only crawlherd
    .venv/bin/python bench/many_hosts.py --frontier redis://127.0.0.1:6379/0 --workers 4 --only raw --only fleet
    # before/after in one run: another checkout's src (e.g. `git archive main src | tar -x -C /tmp/base`)
    .venv/bin/python bench/many_hosts.py --base-src /tmp/base/src   # adds crawlherd@base and cli@base
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

CONCURRENCY = 64
FLEET_TIMES = (0.0, 0.0)  # the last fleet run's start and end (time.time())
ROBOTS = "User-agent: *\nDisallow: /private\n"


def host_addresses(n: int) -> list[str]:
    """``n`` distinct loopback addresses, away from 127.0.0.1 (where the machine's services are)."""
    return [f"127.77.{i // 250}.{i % 250 + 1}" for i in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the server (its own process) -------------------------------------------------------------------


def serve(hosts: int, pages: int, port: int, control: int) -> None:
    from aiohttp import web

    log: list[tuple[str, str, float]] = []

    async def robots(request: web.Request) -> web.Response:
        log.append((request.host, request.path, time.time()))
        return web.Response(text=ROBOTS)

    async def page(request: web.Request) -> web.Response:
        log.append((request.host, request.path, time.time()))
        k = int(request.match_info["k"])
        nxt = f'<a href="/p{k + 1}">next</a>' if k < pages else ""
        return web.Response(
            text=f"<html><body><h1>page {k}</h1>{nxt} <a href=\"/private\">private</a></body></html>",
            content_type="text/html",
        )

    async def private(request: web.Request) -> web.Response:
        log.append((request.host, request.path, time.time()))
        return web.Response(text="disallowed by robots.txt: a polite crawler never comes here")

    async def take_log(request: web.Request) -> web.Response:
        out = list(log)
        log.clear()
        return web.json_response(out)

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/robots.txt", robots)
        app.router.add_get("/p{k:\\d+}", page)
        app.router.add_get("/private", private)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        for addr in host_addresses(hosts):
            await web.TCPSite(runner, addr, port, backlog=1024).start()
        ctl = web.Application()
        ctl.router.add_get("/log", take_log)
        ctl_runner = web.AppRunner(ctl, access_log=None)
        await ctl_runner.setup()
        await web.TCPSite(ctl_runner, "127.0.0.1", control).start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def start_server(hosts: int, pages: int) -> tuple[subprocess.Popen[str], int, int]:
    port, control = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--hosts", str(hosts), "--pages", str(pages),
         "--port", str(port), "--control", str(control)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        sys.exit("the many-host server did not start")
    return proc, port, control


def take_log(control: int) -> list[tuple[str, str, float]]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{control}/log", timeout=30) as resp:
        return [tuple(x) for x in json.load(resp)]  # type: ignore[misc]


# -- clients (each in its own process) ---------------------------------------------------------------


async def run_raw(seeds: list[str], delay: float) -> float:
    import aiohttp

    sem = asyncio.Semaphore(CONCURRENCY)
    link = re.compile(r'href="(/p\d+)"')

    async def host(session: aiohttp.ClientSession, seed: str) -> None:
        origin = seed.rsplit("/", 1)[0]
        url: str | None = origin + "/robots.txt"
        last = 0.0
        while url is not None:
            wait = last + delay - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # no slot held while waiting
            async with sem:
                last = time.monotonic()
                async with session.get(url) as resp:
                    text = await resp.text()
            if url.endswith("/robots.txt"):
                url = seed
            else:
                m = link.search(text)
                url = origin + m.group(1) if m else None

    start = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as session:
        await asyncio.gather(*(host(session, s) for s in seeds))
    return time.monotonic() - start


async def run_crawlherd(seeds: list[str], delay: float, pages: int, frontier: str) -> float:
    from crawlherd import Crawler, CrawlerMonitor, CrawlerRunConfig, RateLimiter, SemaphoreDispatcher

    dispatcher = SemaphoreDispatcher(
        CONCURRENCY, rate_limiter=RateLimiter(base_delay=(0.0, 0.0)), monitor=CrawlerMonitor(enable_ui=False)
    )
    config = CrawlerRunConfig(check_robots_txt=True, concurrency=CONCURRENCY)
    start = time.monotonic()
    async with Crawler(allow_private_addresses=True, config=config) as crawler:
        stream = await crawler.crawl(
            seeds, max_pages=len(seeds) * (pages + 2), max_depth=pages, dispatcher=dispatcher,
            frontier=frontier, delay=delay,
        )
        async with stream:
            async for _ in stream:
                pass
    return time.monotonic() - start


def run_cli(seeds: list[str], delay: float, pages: int, frontier: str, env: dict[str, str] | None = None) -> float:
    cmd = [sys.executable, "-m", "crawlherd", *cli_args(seeds, delay, pages, frontier)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        sys.exit(f"crawlherd crawl failed ({out.returncode}): {out.stderr[-2000:]}")
    return float(json.loads(out.stdout)["elapsed_seconds"])


def cli_args(seeds: list[str], delay: float, pages: int, frontier: str, *extra: str, hosts: int = 0) -> list[str]:
    return [
        "crawl", *seeds, "--allow-private", "--respect-robots", "--concurrency", str(CONCURRENCY),
        "--delay", str(delay), "--max-pages", str((hosts or len(seeds)) * (pages + 2)), "--depth", str(pages),
        "--frontier", frontier, "--json", *extra,
    ]


def fleet_member(seeds: list[str], delay: float, pages: int, frontier: str, share: tuple[int, int]) -> None:
    """One process of the fleet: ``crawlherd crawl`` (the CLI's command) of its ``share`` (k of n) of
    the seeds, following links to any host (``--domain '*'``: a page leased here may be of another
    process's seed); its modules imported first ("ready"), started when told ("go" on stdin) -- a fleet
    of running processes given a crawl, not interpreters starting -- and timed from then to its end."""
    import contextlib
    import io

    import crawlherd.cli._common
    import crawlherd.cli._signals
    import crawlherd.crawler
    import crawlherd.fetch.http
    import crawlherd.frontier.redis
    import crawlherd.settings  # noqa: F401 - what the command imports as it starts
    from crawlherd.cli import _loop
    from crawlherd.cli import main as cli

    own = getattr(_loop, "own_the_process", None)  # the process is the command's own, as `crawlherd crawl`
    if own is not None:  # is (--base-src trees from before it have no such call)
        own()
    print("ready", flush=True)
    sys.stdin.readline()
    out = io.StringIO()
    start = time.time()  # the wall clock: one for the processes of the machine
    with contextlib.redirect_stdout(out):
        mine = seeds[share[0] :: share[1]]
        args = cli_args(mine, delay, pages, frontier, "--domain", "*", hosts=len(seeds))
        with contextlib.suppress(SystemExit):  # 1: "nothing could be crawled" -- the others took it all
            cli.main(args, prog_name="crawlherd", standalone_mode=False)
    end = time.time()
    print(json.dumps({"start": start, "end": end, "pages": json.loads(out.getvalue())["pages/total"]}))


def run_fleet(
    workers: int, seeds_file: Path, args: argparse.Namespace, frontier: str, env: dict[str, str] | None
) -> float:
    cmd = [sys.executable, __file__, "--client", "fleet-member", "--seeds", str(seeds_file), "--delay", str(args.delay),
           "--pages", str(args.pages), "--frontier", frontier, "--workers", str(workers)]
    procs = [subprocess.Popen([*cmd, "--share", str(k)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for k in range(workers)]
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            sys.exit(f"a fleet process did not start: {proc.communicate()[1][-2000:]}")
    for proc in procs:  # all at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    times = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"a fleet process failed ({proc.returncode}): {err[-2000:]}")
        times.append(json.loads(out.strip().splitlines()[-1]))
    first = min(t["start"] for t in times)
    if os.environ.get("MANY_HOSTS_VERBOSE"):
        print("    fleet processes (start, end, pages):",
              [(round(t["start"] - first, 2), round(t["end"] - first, 2), t["pages"]) for t in times])
    global FLEET_TIMES
    FLEET_TIMES = (first, max(t["end"] for t in times))
    return max(t["end"] for t in times) - first


def client_main(args: argparse.Namespace) -> None:
    seeds = json.loads(Path(args.seeds).read_text())
    if args.client == "fleet-member":
        fleet_member(seeds, args.delay, args.pages, args.frontier, (args.share, args.workers))
        return
    if args.client == "raw":
        wall = asyncio.run(run_raw(seeds, args.delay))
    else:
        wall = asyncio.run(run_crawlherd(seeds, args.delay, args.pages, args.frontier))
    print(json.dumps({"wall": wall}))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- what the server saw -----------------------------------------------------------------------------


def check(log: list[tuple[str, str, float]], hosts: int, pages: int, delay: float) -> dict[str, Any]:
    by_host: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for host, path, at in log:
        by_host[host].append((at, path))
    gaps: list[float] = []
    under: list[tuple[float, str, str, str]] = []  # the first few gaps under the delay: what to look at
    robots_first = robots_once = 0
    for host, seen in by_host.items():
        seen.sort()
        gaps.extend(b[0] - a[0] for a, b in zip(seen, seen[1:], strict=False))
        under.extend((round(b[0] - a[0], 3), host, a[1], b[1]) for a, b in zip(seen, seen[1:], strict=False)
                     if b[0] - a[0] < delay)
        robots_first += seen[0][1] == "/robots.txt"
        robots_once += sum(1 for _, p in seen if p == "/robots.txt") == 1
    times = [at for _, _, at in log]
    return {
        "requests": len(log),
        "hosts_seen": len(by_host),
        "pages": sum(1 for _, p, _ in log if p.startswith("/p")),
        "private": sum(1 for _, p, _ in log if p == "/private"),
        "robots_first": robots_first,
        "robots_once": robots_once,
        "min_gap": min(gaps) if gaps else None,
        "mean_gap": statistics.fmean(gaps) if gaps else None,
        "gaps_under_delay": sum(1 for g in gaps if g < delay),
        "under": under[:5],
        "span": max(times) - min(times) if times else 0.0,
        "first_at": min(times, default=0.0),
        "last_at": max(times, default=0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frontier", default="memory://")
    parser.add_argument("--only", choices=["raw", "crawlherd", "cli", "fleet"], action="append")
    parser.add_argument("--workers", type=int, default=0, help="the fleet's processes (needs a redis:// frontier)")
    parser.add_argument("--base-src", help="also run crawlherd and cli from this src directory (PYTHONPATH)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--control", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--seeds", help=argparse.SUPPRESS)
    parser.add_argument("--share", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.hosts, args.pages, args.port, args.control)
        return
    if args.client:
        client_main(args)
        return

    clients = args.only or ["raw", "crawlherd", "cli", *(["fleet"] if args.workers else [])]
    if "fleet" in clients and (args.workers < 1 or not args.frontier.startswith("redis")):
        sys.exit("the fleet needs --workers N and a --frontier redis://... its processes share")
    if args.base_src:
        clients += [f"{c}@base" for c in clients if c != "raw"]
    ideal = (args.pages - 1 + 2) * args.delay
    server, port, control = start_server(args.hosts, args.pages)
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"{args.hosts} hosts x {args.pages} chained pages, delay {args.delay} s, robots.txt obeyed, "
                  f"concurrency {CONCURRENCY}, frontier {args.frontier}; ideal {ideal:.1f} s; cpus {os.cpu_count()}"
                  + (f"; fleet of {args.workers} processes" if "fleet" in clients else ""))
            for rnd in range(args.rounds):
                for client in clients:
                    take_log(control)  # start from an empty log
                    cpu0 = _children_cpu()
                    wall = run_client(client, args, Path(tmp), port)
                    cpu = _children_cpu() - cpu0  # the client's process (the server is not reaped yet)
                    seen = check(take_log(control), args.hosts, args.pages, args.delay)
                    results[client].append({"wall": wall, "of_ideal": ideal / wall, "cpu": cpu, **seen})
                    report_round(rnd, client, wall, ideal, cpu, seen, args.hosts)
    finally:
        server.kill()
        server.wait()
    summary(results, ideal, args.rounds)


def run_client(client: str, args: argparse.Namespace, tmp: Path, port: int) -> float:
    """One run of ``client`` (``kind[@base]``): its wall time."""
    # fresh names every run (a redis:// frontier keeps what it saw under its prefix)
    frontier = args.frontier
    if frontier.startswith("redis"):
        frontier += ("&" if "?" in frontier else "?") + f"prefix=bench-many-{uuid.uuid4().hex[:8]}"
    elif frontier.startswith("sqlite"):
        frontier = f"sqlite:///{tmp}/f-{uuid.uuid4().hex[:8]}.db"
    seeds = [f"http://{a}:{port}/p1" for a in host_addresses(args.hosts)]
    seeds_file = tmp / "seeds.json"
    seeds_file.write_text(json.dumps(seeds))
    try:
        return _run_client(client, args, seeds, seeds_file, frontier)
    finally:
        if frontier.startswith("redis"):  # what the run left under its prefix (the Redis may be shared)
            asyncio.run(_purge(frontier))


async def _purge(frontier: str) -> None:
    from crawlherd.frontier import open_scheduler

    async with open_scheduler(frontier) as opened:
        await opened.purge()


def _run_client(client: str, args: argparse.Namespace, seeds: list[str], seeds_file: Path, frontier: str) -> float:
    kind, _, base = client.partition("@")
    env = {**os.environ, "PYTHONPATH": args.base_src} if base else None
    if kind == "cli":
        return run_cli(seeds, args.delay, args.pages, frontier, env)
    if kind == "fleet":
        return run_fleet(args.workers, seeds_file, args, frontier, env)
    out = subprocess.run(
        [sys.executable, __file__, "--client", kind, "--seeds", str(seeds_file),
         "--delay", str(args.delay), "--pages", str(args.pages), "--frontier", frontier],
        capture_output=True, text=True, check=False, env=env,
    )
    if out.returncode != 0:
        sys.exit(f"client {client} failed: {out.stderr[-2000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["wall"])


def report_round(
    rnd: int, client: str, wall: float, ideal: float, cpu: float, seen: dict[str, Any], hosts: int
) -> None:
    print(f"round {rnd + 1} {client:14} wall {wall:6.2f} s  {ideal / wall:4.2f} of ideal  "
          f"cpu {cpu:5.1f} s  "
          f"server: {seen['requests']} requests over {seen['span']:.2f} s, gap/host min "
          f"{seen['min_gap']:.3f} s mean {seen['mean_gap']:.3f} s, {seen['gaps_under_delay']} under "
          f"the delay, robots.txt "
          f"first {seen['robots_first']}/{hosts} once {seen['robots_once']}/{hosts}, "
          f"pages {seen['pages']}, /private {seen['private']}", flush=True)
    if client.startswith("fleet") and os.environ.get("MANY_HOSTS_VERBOSE"):
        print(f"    first request {seen['first_at'] - FLEET_TIMES[0]:.2f} s after the fleet's start, "
              f"last {FLEET_TIMES[1] - seen['last_at']:.2f} s before its end", flush=True)
    if seen["under"]:
        print(f"    under the delay (gap, host, request, next request): {seen['under']}", flush=True)


def summary(results: dict[str, list[dict[str, Any]]], ideal: float, rounds: int) -> None:
    print(f"\nmedians of {rounds} interleaved round(s); ideal {ideal:.1f} s")
    print(f"{'client':14} {'wall s':>7} {'of ideal':>9} {'cpu ms/req':>10} {'min gap s':>10} {'mean gap s':>10} "
          f"{'gaps<delay':>10} {'requests':>8} {'vs raw':>7}")
    raw_wall = statistics.median(r["wall"] for r in results["raw"]) if results.get("raw") else None
    for client, rows in results.items():
        wall = statistics.median(r["wall"] for r in rows)
        gap = min(r["min_gap"] for r in rows)
        under = sum(r["gaps_under_delay"] for r in rows)
        vs = f"{raw_wall / wall:7.2f}" if raw_wall else "      -"
        cpu_ms = statistics.median(1000 * r["cpu"] / r["requests"] for r in rows)
        mean_gap = statistics.median(r["mean_gap"] for r in rows)
        requests = statistics.median(r["requests"] for r in rows)
        print(f"{client:14} {wall:7.2f} {ideal / wall:9.2f} {cpu_ms:10.2f} {gap:10.3f} {mean_gap:10.3f} {under:10d} "
              f"{requests:8.0f} {vs}")

if __name__ == "__main__":
    main()
