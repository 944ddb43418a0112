"""The whole pipeline on a 20-host job board, against raw aiohttp fetching the same pages.

The board (its own process, a small asyncio HTTP/1.1 server, static pages built at start): ``--hosts``
loopback addresses ``127.78.0.x`` (each its own host for politeness and robots.txt), each a website
with ``--searches`` searches (targets) of ``--listing-pages`` listing pages of ``--per-page``
postings, each posting with a detail page: by default 20 x 5 x (5 + 5 x 20) = 10,500 pages.
robots.txt disallows ``/private`` (never linked). Pages link: listing page k -> page k+1
(``a[rel=next]``) and its postings' detail pages; detail pages link nowhere.

Clients, each in its own process(es), rounds interleaved; delay 0, 8 requests in flight per host, 64 in
all, robots.txt obeyed: ``raw`` (the baseline), aiohttp on the same URLs (each host's robots.txt first,
``urllib.robotparser``), 64 tasks, a semaphore of 8 per host; ``crawl``, ``crawlherd crawl`` of the 100
searches (``--depth 5``); ``run``, ``crawlherd run --until-idle`` on a scratch SQLite file (its embedded
broker and frontier), the targets imported and due; ``fleet``, a scratch PostgreSQL database, RabbitMQ (a
queue of its own), a ``redis://`` frontier (a prefix of its own), ``--workers`` ``crawlherd worker``
(64 / workers pages each), then ``crawlherd dispatch --once``; the workers stopped once every job succeeded.

Measured at the server, from a client's first request to its last page: pages/s, and the client's CPU
summed over its processes (``/proc``; start-up and shutdown left out). Checked: every page fetched once
(robots.txt: once per host and process); ``run`` and ``fleet``: every job succeeded, the 10,000 items
stored exactly as the board shows them (the listing's fields and the detail page's).

    .venv/bin/python bench/pipeline.py                       # raw, crawl, run, fleet; 3 rounds
    .venv/bin/python bench/pipeline.py --only raw --only fleet --rounds 1
    BENCH_PIPELINE_PYSPY=/tmp/p .venv/bin/python bench/pipeline.py --only run --rounds 1  # py-spy of each process

Services (``fleet``): PostgreSQL (``--postgres-url``), RabbitMQ (``--amqp-url``), Redis (``--redis-url``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import IO, Any

import yaml

from many_hosts import free_port
from soak import create_database, delete_redis_keys, drop_database  # the soak's scratch services

KEYWORDS = ("python", "rust", "data", "devops", "design", "sales", "support", "golang", "java", "frontend")
LOCATION = "remote"
PER_HOST = 8
IN_FLIGHT = 64
ROBOTS = b"User-agent: *\nDisallow: /private\n"


def host_addresses(n: int) -> list[str]:
    return [f"127.78.0.{i + 1}" for i in range(n)]


# -- the board -----------------------------------------------------------------------------------------


class Board:
    """The pages of every host (``pages[host][path]``) and the items a crawl must store (by URL)."""

    def __init__(self, hosts: int, searches: int, listing_pages: int, per_page: int, port: int) -> None:
        self.addresses = host_addresses(hosts)
        self.port = port
        self.keywords = KEYWORDS[:searches]
        self.pages: dict[str, dict[str, bytes]] = {}
        self.items: dict[str, dict[str, str]] = {}
        for h, addr in enumerate(self.addresses):
            base = f"http://{addr}:{port}"
            pages = self.pages[addr] = {"/robots.txt": ROBOTS}
            for kw in self.keywords:
                for p in range(1, listing_pages + 1):
                    cards = []
                    for i in range(per_page):
                        n = (p - 1) * per_page + i
                        path = f"/jobs/{kw}-{n}"
                        item = {"title": f"{kw.capitalize()} engineer {h}-{n}", "company": f"Company {h * 7 + n % 13}",
                                "location": LOCATION.capitalize(), "salary": f"EUR {40 + n % 50},000",
                                "description": f"Work on {kw} at host {h}, posting {n}." + " Details follow." * 20}
                        self.items[base + path] = item
                        cards.append(
                            f'<article class="job-card"><h2 class="title">{item["title"]}</h2>'
                            f'<a class="job-link" href="{path}">details</a><span class="company">{item["company"]}'
                            f'</span><span class="location">{item["location"]}</span><span class="salary">'
                            f'{item["salary"]}</span><p>{"A posting summary. " * 8}</p></article>')
                        pages[path] = (f'<html><head><title>{item["title"]}</title></head><body><h1>{item["title"]}'
                                       f'</h1><div class="description">{item["description"]}</div></body></html>'
                                       ).encode()
                    nxt = f'<a rel="next" href="{self.listing(kw, p + 1)}">next</a>' if p < listing_pages else ""
                    pages[self.listing(kw, p)] = (f"<html><body><h1>{kw}, page {p}</h1>{''.join(cards)}{nxt}"
                                                  "</body></html>").encode()

    @staticmethod
    def listing(keyword: str, page: int) -> str:
        return f"/search/{keyword}/{LOCATION}" + (f"/{page}" if page > 1 else "")

    def urls(self) -> list[str]:
        """Every page but robots.txt, hosts interleaved."""
        per_host = [[f"http://{a}:{self.port}{p}" for p in self.pages[a] if p != "/robots.txt"] for a in self.addresses]
        return [u for group in zip(*per_host, strict=True) for u in group]

    def seeds(self) -> list[str]:
        return [f"http://{a}:{self.port}{self.listing(kw, 1)}" for a in self.addresses for kw in self.keywords]

    def targets(self) -> dict[str, Any]:
        fields = {"title": "h2.title", "company": ".company", "location": ".location", "salary": ".salary"}
        extraction = {"item_selector": "article.job-card", "item_url": "a.job-link@href", "required": ["title"],
                      "fields": fields, "detail_fields": {"description": ".description"}}
        websites, targets = [], []
        for h, addr in enumerate(self.addresses):
            base = f"http://{addr}:{self.port}"
            websites.append({
                "name": f"board-{h}", "base_url": base, "search_url_template": base + "/search/{keywords}/{location}",
                "pagination": {"type": "next_link", "selector": "a[rel=next]", "max_pages": 50},
                "extraction": extraction,
                "politeness": {"min_delay": 0.0, "max_concurrency": PER_HOST, "robots": "obey"},
            })
            targets.append({"website": f"board-{h}", "keywords": list(self.keywords), "locations": [LOCATION],
                            "every": "1h"})
        return {"websites": websites, "targets": targets}


def cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(board: Board, control: int) -> None:
    """The board's server; ``127.0.0.1:control`` takes ``arm PIDS EXPECTED`` (a client's round begins) and
    ``take`` (what it saw, JSON) as request paths (``/arm/1,2/10500``, ``/take``)."""
    pages = {a: {p.encode(): body for p, body in ps.items()} for a, ps in board.pages.items()}
    heads = {(a, p): b"HTTP/1.1 200 OK\r\nContent-Type: " + (b"text/plain" if p == b"/robots.txt" else b"text/html")
             + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
             for a, ps in pages.items() for p, body in ps.items()}
    state: dict[str, Any] = {"log": [], "pids": [], "expected": 0, "cpu0": None, "cpu1": None, "seen": 0}

    def answer(addr: str, path: bytes) -> bytes:
        if addr == "127.0.0.1":
            parts = path.decode().strip("/").split("/")
            if parts[0] == "arm":
                state.update(log=[], pids=[int(p) for p in parts[1].split(",")], expected=int(parts[2]),
                             cpu0=None, cpu1=None, seen=0)
                body = b"armed"
            else:
                body = json.dumps(summary()).encode()
            return b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        now = time.monotonic()
        if state["cpu0"] is None:
            state["cpu0"] = [cpu_of(p) for p in state["pids"]]
        state["log"].append((now, addr, path))
        if path != b"/robots.txt":
            state["seen"] += 1
            if state["seen"] == state["expected"]:
                state["cpu1"] = [cpu_of(p) for p in state["pids"]]
        found = heads.get((addr, path))
        return found if found is not None else b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    def summary() -> dict[str, Any]:
        log = state["log"]
        got = Counter((a, p) for _, a, p in log if p != b"/robots.txt")
        want = {(a, p) for a, ps in pages.items() for p in ps if p != b"/robots.txt"}
        last_page = max((t for t, _, p in log if p != b"/robots.txt"), default=0.0)
        return {
            "pages": sum(got.values()), "distinct": len(set(got) & want), "missing": len(want - set(got)),
            "extra": len(set(got) - want), "twice": sum(1 for n in got.values() if n > 1),
            "robots": sum(1 for _, _, p in log if p == b"/robots.txt"),
            "seconds": last_page - log[0][0] if log else 0.0,
            "cpu": sum(b - a for a, b in zip(state["cpu0"], state["cpu1"], strict=True)) if state["cpu1"] else None,
        }

    class Http(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]
            self.addr = transport.get_extra_info("sockname")[0]
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while (end := self.buf.find(b"\r\n\r\n")) >= 0:
                line = self.buf[: self.buf.find(b"\r\n")]
                self.buf = self.buf[end + 4 :]
                target = line.split(b" ")[1]
                self.transport.write(answer(self.addr, target.split(b"?", 1)[0]))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for addr in [*board.addresses, "127.0.0.1"]:
            await loop.create_server(Http, addr, control if addr == "127.0.0.1" else board.port, backlog=1024)
        print("ready", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


def control(port: int, path: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as resp:
        body = resp.read()
    return json.loads(body) if path == "/take" else body


# -- the raw client (its own process) -------------------------------------------------------------------


async def raw_client(urls: list[str]) -> int:
    import urllib.robotparser
    from urllib.parse import urlsplit

    import aiohttp

    fetched = 0
    robots: dict[str, asyncio.Task[urllib.robotparser.RobotFileParser]] = {}
    hosts: dict[str, asyncio.Semaphore] = {}
    todo = iter(urls)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=IN_FLIGHT, limit_per_host=PER_HOST)) as s:

        async def fetch_rules(origin: str) -> urllib.robotparser.RobotFileParser:
            parser = urllib.robotparser.RobotFileParser()
            async with s.get(origin + "/robots.txt") as resp:
                parser.parse((await resp.text()).splitlines())
            return parser

        async def rules(origin: str) -> urllib.robotparser.RobotFileParser:
            if origin not in robots:
                robots[origin] = asyncio.create_task(fetch_rules(origin))
            return await robots[origin]

        async def task() -> None:
            nonlocal fetched
            for url in todo:
                parts = urlsplit(url)
                origin = f"{parts.scheme}://{parts.netloc}"
                if not (await rules(origin)).can_fetch("*", url):
                    continue
                async with hosts.setdefault(origin, asyncio.Semaphore(PER_HOST)), s.get(url) as resp:
                    await resp.read()
                    fetched += resp.status == 200

        await asyncio.gather(*(task() for _ in range(IN_FLIGHT)))
    return fetched


# -- the driver -----------------------------------------------------------------------------------------


def crawlherd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "crawlherd", *argv]


class Round:
    """One client's round: its processes armed at the server, py-spy on them when asked."""

    def __init__(self, args: argparse.Namespace, mode: str) -> None:
        self.args, self.mode = args, mode
        self.spies: list[subprocess.Popen[bytes]] = []

    def arm(self, *procs: subprocess.Popen[Any]) -> None:
        control(self.args.control, f"/arm/{','.join(str(p.pid) for p in procs)}/{self.args.expected}")
        spy = os.environ.get("BENCH_PIPELINE_PYSPY")
        for i, p in enumerate(procs if spy else ()):
            self.spies.append(subprocess.Popen(["py-spy", "record", "--pid", str(p.pid), "-r", "200", "-f", "raw",
                                               "--nonblocking", "-o", f"{spy}-{self.mode}-{i}.txt"]))

    def take(self) -> dict[str, Any]:
        for spy in self.spies:
            spy.send_signal(signal.SIGINT)
            spy.wait()
        seen = control(self.args.control, "/take")
        if seen["missing"] or seen["extra"] or seen["cpu"] is None:
            sys.exit(f"{self.mode}: the server saw {seen}")
        return seen


def round_raw(args: argparse.Namespace, board: Board) -> dict[str, Any]:
    r = Round(args, "raw")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(board.urls(), f)
        f.flush()
        proc = subprocess.Popen([sys.executable, __file__, "--raw-client", f.name], stdout=subprocess.PIPE, text=True)
        r.arm(proc)
        out, _ = proc.communicate(timeout=900)
    if proc.returncode != 0 or json.loads(out)["fetched"] != args.expected:
        sys.exit(f"raw client failed: {out}")
    return r.take()


def round_crawl(args: argparse.Namespace, board: Board) -> dict[str, Any]:
    r = Round(args, "crawl")
    cmd = crawlherd("crawl", *board.seeds(), "--allow-private", "--respect-robots", "--concurrency", str(IN_FLIGHT),
                    "--per-host", str(PER_HOST), "--delay", "0", "--depth", "5", "--max-pages",
                    str(2 * args.expected), "--loop", args.loop, "--no-progress", "--json", "-q")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r.arm(proc)
    out, err = proc.communicate(timeout=900)
    if proc.returncode != 0:
        sys.exit(f"crawlherd crawl failed ({proc.returncode}): {err[-3000:]}")
    return r.take()


async def prepare(db_url: str, board: Board) -> None:
    """The config DB migrated, the board's targets imported and due now."""
    from datetime import UTC, datetime

    from sqlalchemy import update

    from crawlherd.db import ScrapeTarget, create_engine, upgrade
    from crawlherd.dispatch.targets import import_targets

    engine = create_engine(db_url)
    try:
        await upgrade(engine)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(board.targets(), f)
        await import_targets(engine, f.name)
        os.unlink(f.name)
        async with engine.begin() as conn:
            await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC)))
    finally:
        await engine.dispose()


async def stored(db_url: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """(jobs succeeded, the items stored by URL)."""
    from sqlalchemy import func, select

    from crawlherd.db import JobRun, StoredItem, create_engine

    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            ok = (await conn.execute(select(func.count()).select_from(JobRun).where(JobRun.status == "succeeded")))
            items = await conn.execute(select(StoredItem.url, StoredItem.data))
            return int(ok.scalar_one()), {url: data for url, data in items}
    finally:
        await engine.dispose()


def check_items(mode: str, board: Board, jobs: int, items: dict[str, dict[str, Any]]) -> None:
    wrong = [url for url, want in board.items.items()
             if {k: items.get(url, {}).get(k) for k in want} != want]
    if jobs != len(board.seeds()) or wrong or len(items) != len(board.items):
        sys.exit(f"{mode}: {jobs} jobs succeeded, {len(items)} items stored, {len(wrong)} wrong or missing "
                 f"(e.g. {wrong[:1]}: {items.get(wrong[0]) if wrong else None})")


def round_run(args: argparse.Namespace, board: Board) -> dict[str, Any]:
    r = Round(args, "run")
    with tempfile.TemporaryDirectory() as tmp:
        db_url = f"sqlite:///{tmp}/crawlherd.db"
        asyncio.run(prepare(db_url, board))
        cmd = crawlherd("run", "--until-idle", "--no-console", "-q", "--allow-private", "--concurrency",
                        str(args.jobs), "--page-concurrency", str(IN_FLIGHT), "--loop", args.loop)
        proc = subprocess.Popen(cmd, env={**os.environ, "CRAWLHERD_DATABASE_URL": db_url},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        r.arm(proc)
        _, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            sys.exit(f"crawlherd run failed ({proc.returncode}): {err[-3000:]}")
        seen = r.take()
        check_items("run", board, *asyncio.run(stored(db_url)))
    return seen


def round_fleet(args: argparse.Namespace, board: Board) -> dict[str, Any]:
    r = Round(args, "fleet")
    run_id = f"pl{uuid.uuid4().hex[:10]}"
    db_url = asyncio.run(create_database(args.postgres_url, run_id))
    broker_url = f"{args.amqp_url}?queue={run_id}"
    env = {**os.environ, "CRAWLHERD_DATABASE_URL": db_url, "CRAWLHERD_BROKER_URL": broker_url}
    workers: list[subprocess.Popen[str]] = []
    logs = contextlib.ExitStack()  # the workers' stderr, kept in --logs
    try:
        asyncio.run(prepare(db_url, board))
        for _ in range(args.workers):
            workers.append(subprocess.Popen(
                crawlherd("worker", "--allow-private", "-q", "--frontier-url", f"{args.redis_url}?prefix={run_id}",
                          "--concurrency", str(args.jobs), "--page-concurrency", str(IN_FLIGHT // args.workers),
                          "--loop", args.loop),
                env=env, stdout=subprocess.DEVNULL, stderr=logs.enter_context(log_file(args, run_id, len(workers)))))
        r.arm(*workers)
        subprocess.run(crawlherd("dispatch", "--once", "-q"), env=env, timeout=300, check=True)
        deadline = time.monotonic() + 900
        while (jobs_items := asyncio.run(stored(db_url)))[0] < len(board.seeds()):
            if any(w.poll() is not None for w in workers) or time.monotonic() > deadline:
                sys.exit(f"fleet: {jobs_items[0]} jobs succeeded; a worker exited or time ran out")
            time.sleep(0.5)
        seen = r.take()
        check_items("fleet", board, *jobs_items)
        return seen
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(60)
            except subprocess.TimeoutExpired:
                w.kill()
        logs.close()
        asyncio.run(cleanup(args, run_id, broker_url))


def log_file(args: argparse.Namespace, run_id: str, i: int) -> IO[str]:
    return Path(args.logs, f"{run_id}-{i}.log").open("w")


async def cleanup(args: argparse.Namespace, run_id: str, broker_url: str) -> None:
    from tests.support.real_brokers import delete_queues  # importable: soak put the checkout on the path

    from crawlherd.brokers import open_broker

    await drop_database(args.postgres_url, run_id)
    await delete_redis_keys(args.redis_url, run_id)
    async with open_broker(broker_url) as broker:
        await delete_queues(broker)


MODES = {"raw": round_raw, "crawl": round_crawl, "run": round_run, "fleet": round_fleet}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=list(MODES), action="append")
    for name, default in (("hosts", 20), ("searches", 5), ("listing-pages", 5), ("per-page", 20)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--jobs", type=int, default=16, help="jobs at once per worker process (--concurrency)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the fleet")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    for name, url in (("postgres", "postgresql://postgres@127.0.0.1:5432/test"), ("redis", "redis://127.0.0.1:6379/0"),
                      ("amqp", "amqp://guest:guest@127.0.0.1:5672/")):
        parser.add_argument(f"--{name}-url", default=os.environ.get(f"CRAWLHERD_TEST_{name.upper()}_URL", url))
    parser.add_argument("--logs", default=tempfile.gettempdir(), help="where the fleet's workers write their stderr")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--control-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--raw-client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_client:
        urls = json.loads(Path(args.raw_client).read_text())
        print(json.dumps({"fetched": asyncio.run(raw_client(urls))}))
        return
    port = args.serve or free_port()
    board = Board(args.hosts, args.searches, args.listing_pages, args.per_page, port)
    if args.serve:
        serve(board, args.control_port)
        return
    args.expected = len(board.urls())
    args.control = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--control-port", str(args.control),
                               *(a for k in ("hosts", "searches", "listing_pages", "per_page")
                                 for a in (f"--{k.replace('_', '-')}", str(getattr(args, k))))],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    if server.stdout.readline().strip() != "ready":
        sys.exit("the board's server did not start")
    modes = args.only or list(MODES)
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    print(f"{args.hosts} hosts x {args.searches} searches x {args.listing_pages} listing pages x {args.per_page} "
          f"postings: {args.expected} pages; {PER_HOST} per host, {IN_FLIGHT} in flight, delay 0, robots.txt obeyed; "
          f"jobs {args.jobs} per worker, fleet of {args.workers}; {os.cpu_count()} CPUs", flush=True)
    try:
        for rnd in range(args.rounds):
            for mode in modes:
                seen = MODES[mode](args, board)
                results[mode].append(seen)
                print(f"round {rnd + 1} {mode:6} {args.expected / seen['seconds']:7.0f} pages/s  "
                      f"{seen['cpu'] / args.expected * 1e6:5.0f} us CPU/page  twice {seen['twice']}  robots.txt "
                      f"{seen['robots']}  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        server.kill()
        server.wait()
    print(f"\nmedians of {args.rounds} interleaved round(s)\n{'client':8}{'pages/s':>9}{'vs raw':>8}"
          f"{'CPU us/page':>13}{'vs raw':>8}")
    rate = {m: statistics.median(args.expected / s["seconds"] for s in rows) for m, rows in results.items()}
    cpu = {m: statistics.median(s["cpu"] / args.expected * 1e6 for s in rows) for m, rows in results.items()}
    for m in results:
        vs, vc = (f"{rate[m] / rate['raw']:7.2f}x", f"{cpu[m] / cpu['raw']:7.2f}x") if "raw" in results else ("-", "-")
        print(f"{m:8}{rate[m]:>9.0f}{vs:>8}{cpu[m]:>13.0f}{vc:>8}")


if __name__ == "__main__":
    main()
