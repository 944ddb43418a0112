"""A worker on real work: pages/s of one ``crawlherd worker`` process crawling the demo job board --
paginated searches whose items have detail pages -- through a real broker (Redis Streams) and the
Redis frontier, storing the items in a PostgreSQL config DB, against the engine crawling the same pages
alone (``Crawler.arun_many``, one process, the same concurrency and the same rate limiter).

Each round, interleaved:

- ``worker``: a scratch PostgreSQL database gets the targets (every keyword x location of the board,
  page_param pagination, detail pages, robots.txt obeyed, no delay, the website's max_concurrency =
  ``--page-concurrency``); ``crawlherd dispatch --once`` publishes one job per search to a Redis stream
  of its own; then one ``crawlherd worker`` (``--concurrency`` jobs at once, ``--page-concurrency``
  pages in flight, a ``redis://`` frontier of its own) runs until every job succeeded and every item's
  detail page was fetched, and is stopped with SIGTERM;
- ``engine``: a process runs ``Crawler.arun_many`` over exactly the pages the worker fetched in the same
  round (listing and detail), with ``SemaphoreDispatcher(--page-concurrency)`` and the worker's
  ``RateLimiter``, robots.txt obeyed, results streamed and dropped.

The demo site is served by this script's process (not a measured one; no 429s); the time of a run is
taken from the site's own log, first request to last, so process start-up and the broker's idle polls
are not counted. The ratio is worker seconds / engine seconds for the same pages (goal <= 1.3).

    .venv/bin/python bench/worker.py                  # 3 rounds, the default loop (uvloop when installed)
    .venv/bin/python bench/worker.py --loop asyncio --rounds 5
    .venv/bin/python bench/worker.py --rounds 1 --profile   # py-spy-free cProfile of the worker (stderr)

Services: PostgreSQL (``--postgres-url``, a scratch database is created beside it and dropped) and
Redis (``--redis-url``; keys under a prefix of the run's own, deleted at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from soak import create_database, delete_redis_keys, drop_database  # the soak's scratch services

ROOT = Path(__file__).resolve().parents[1]
KEYWORDS = ("python", "rust", "devops", "frontend", "data", "golang", "java", "design", "sales", "support")
LOCATIONS = ("berlin", "london", "paris", "remote", "madrid", "oslo", "vienna", "zurich")


def document(base: str, page_concurrency: int) -> dict[str, Any]:
    return {
        "websites": [
            {
                "name": "bench-jobs",
                "base_url": base,
                "search_url_template": base + "/search?q={keywords}&l={location}",
                "pagination": {"type": "page_param", "param": "page", "start": 1, "max_pages": 50},
                "extraction": {
                    "item_selector": "article.job-card",
                    "item_url": "a.job-link@href",
                    "required": ["title"],
                    "fields": {"title": "h2.title", "company": ".company", "location": ".location",
                               "salary": ".salary"},
                    "detail_fields": {"description": ".description"},
                },
                "politeness": {"min_delay": 0.0, "max_concurrency": page_concurrency, "robots": "obey"},
            }
        ],
        "targets": [{"website": "bench-jobs", "keywords": list(KEYWORDS), "locations": list(LOCATIONS),
                     "every": "1h"}],
    }


# -- the engine alone (its own process) --------------------------------------------------------------


async def engine_client(urls: list[str], concurrency: int) -> int:
    from crawlherd import Crawler, CrawlerRunConfig, RateLimiter, SemaphoreDispatcher

    dispatcher = SemaphoreDispatcher(concurrency, rate_limiter=RateLimiter(base_delay=(0.0, 0.0), decay=0.5))
    ok = 0
    config = CrawlerRunConfig(check_robots_txt=True)
    async with Crawler(allow_private_addresses=True, config=config) as crawler:
        results = await crawler.arun_many(urls, dispatcher=dispatcher, stream=True)
        async with results:
            async for result in results:
                ok += result.success
    return ok


def run_engine_client(args: argparse.Namespace) -> None:
    from crawlherd.cli._loop import run_async

    urls = Path(args.urls_file).read_text().split()
    cpu = time.process_time()
    ok = run_async(engine_client(urls, args.page_concurrency), args.loop)
    print(json.dumps({"ok": ok, "urls": len(urls), "cpu": time.process_time() - cpu}))


# -- the driver --------------------------------------------------------------------------------------


def crawlherd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "crawlherd", *argv]


async def wait_process(proc: asyncio.subprocess.Process, what: str, timeout: float = 120.0) -> str:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    if proc.returncode != 0:
        sys.exit(f"{what} failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    return out.decode()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def window(site: Any, mark: int) -> tuple[list[str], float]:
    """The pages served since entry ``mark`` of the site's log (robots.txt left out: each side fetches
    it itself) and the seconds from the first request to the last."""
    entries = list(site.log.entries)[mark:]
    pages = [e for e in entries if e.path != "/robots.txt"]
    if any(e.status != 200 for e in pages):
        bad = [f"{e.status} {e.path}?{e.query}" for e in pages if e.status != 200][:5]
        sys.exit(f"the site answered errors: {bad}")
    urls = [site.url + e.path + (f"?{e.query}" if e.query else "") for e in pages]
    return urls, entries[-1].time - entries[0].time


async def worker_round(args: argparse.Namespace, site: Any, run_id: str, processes: int = 1
                       ) -> tuple[list[str], float, float]:
    from sqlalchemy import func, select, update

    from crawlherd.db import JobRun, ScrapeTarget, create_engine, upgrade
    from crawlherd.dispatch.targets import import_targets

    name = f"crawlherd_bench_{run_id}"
    db_url = await create_database(args.postgres_url, name)
    broker_url = f"{args.redis_url}?prefix={run_id}-broker"
    frontier_url = f"{args.redis_url}?prefix={run_id}-frontier"
    engine = create_engine(db_url)
    workers: list[asyncio.subprocess.Process] = []
    try:
        await upgrade(engine)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(document(site.url, args.page_concurrency), f)
        await import_targets(engine, f.name)
        os.unlink(f.name)
        async with engine.begin() as conn:
            await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC)))
            jobs = (await conn.execute(select(func.count()).select_from(ScrapeTarget))).scalar_one()
        env = {**os.environ, "CRAWLHERD_DATABASE_URL": db_url, "CRAWLHERD_BROKER_URL": broker_url}
        dispatch = await asyncio.create_subprocess_exec(
            *crawlherd("dispatch", "--once", "-q"), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        await wait_process(dispatch, "crawlherd dispatch --once")
        expected_details = len({e["url"] for k in KEYWORDS for loc in LOCATIONS for e in site.expected_items(k, loc)})
        mark = len(site.log.entries)
        argv = ["worker", "--allow-private", "--frontier-url", frontier_url, "--concurrency", str(args.jobs),
                "--page-concurrency", str(args.page_concurrency), "--loop", args.loop, "-q"]
        command = crawlherd(*argv)
        if args.profile:
            command = [sys.executable, "-m", "cProfile", "-s", "tottime", "-m", "crawlherd", *argv]
        elif os.environ.get("BENCH_WORKER_WRAPPER"):  # a script that runs the CLI with instrumentation
            command = [sys.executable, os.environ["BENCH_WORKER_WRAPPER"], *argv]
        for _ in range(processes):  # sharing the broker, the frontier and the config DB
            workers.append(await asyncio.create_subprocess_exec(
                *command, env=env, stdout=asyncio.subprocess.PIPE if args.profile else asyncio.subprocess.DEVNULL,
                stderr=None if os.environ.get("BENCH_WORKER_WRAPPER") else asyncio.subprocess.PIPE,
            ))
        worker = workers[0]
        spy = None
        if os.environ.get("BENCH_WORKER_PYSPY"):  # sample the worker's CPU with py-spy (flame graph input)
            spy = await asyncio.create_subprocess_exec(
                "py-spy", "record", "--pid", str(worker.pid), "-r", "200", "-f", "raw", "--nonblocking",
                "-o", os.environ["BENCH_WORKER_PYSPY"], stdout=asyncio.subprocess.DEVNULL,
            )
        deadline = time.monotonic() + args.timeout
        cpu0: float | None = None
        while True:
            await asyncio.sleep(0.25 if cpu0 is not None else 0.01)
            if cpu0 is None and len(site.log.entries) > mark:
                cpu0 = sum(cpu_seconds(w.pid) for w in workers)  # their CPU from the first request on
            if any(w.returncode is not None for w in workers):
                sys.exit("a worker exited")
            details = sum(1 for e in list(site.log.entries)[mark:] if e.path.startswith("/jobs/"))
            if details >= expected_details:
                async with engine.connect() as conn:
                    done = (await conn.execute(
                        select(func.count()).select_from(JobRun).where(JobRun.status == "succeeded")
                    )).scalar_one()
                if done >= jobs:
                    break
            if time.monotonic() > deadline:
                sys.exit(f"the worker did not finish in {args.timeout:g} s ({details}/{expected_details} details)")
        urls, seconds = window(site, mark)
        cpu = sum(cpu_seconds(w.pid) for w in workers) - (cpu0 or 0.0)
        if os.environ.get("BENCH_WORKER_TRACE"):  # the site's log of the worker's round, for a timeline
            Path(os.environ["BENCH_WORKER_TRACE"]).write_text("\n".join(  # noqa: ASYNC240 - after the timing
                f"{e.time:.4f} {e.path}?{e.query}" for e in list(site.log.entries)[mark:]))
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            await spy.wait()
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            out, err = await asyncio.wait_for(w.communicate(), 60)
            if args.profile:
                sys.stderr.write("\n".join(out.decode().splitlines()[:60]) + "\n")
        return urls, seconds, cpu
    finally:
        for w in workers:
            if w.returncode is None:
                w.kill()
                await w.wait()
        await engine.dispose()
        await drop_database(args.postgres_url, name)
        await delete_redis_keys(args.redis_url, run_id)


async def engine_round(args: argparse.Namespace, site: Any, urls: list[str]) -> tuple[float, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(urls))
    try:
        mark = len(site.log.entries)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--engine-client", f.name, "--page-concurrency", str(args.page_concurrency),
            "--loop", args.loop, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        data = json.loads((await wait_process(proc, "the engine client")).strip().splitlines()[-1])
    finally:
        os.unlink(f.name)
    if data["ok"] != len(urls):
        sys.exit(f"the engine fetched {data['ok']} of {len(urls)} pages")
    return window(site, mark)[1], data["cpu"]


async def drive(args: argparse.Namespace) -> None:
    from crawlherd.demo import DemoSite

    counts = args.processes or [1]
    worker_s: dict[int, list[float]] = {n: [] for n in counts}
    worker_cpu: dict[int, list[float]] = {n: [] for n in counts}
    engine_s: list[float] = []
    engine_cpu: list[float] = []
    pages = 0
    async with DemoSite(throttle_every=0, keywords=KEYWORDS, locations=LOCATIONS, min_jobs=20, max_jobs=60) as site:
        for i in range(args.rounds):
            for n in counts:
                urls, seconds, cpu = await worker_round(args, site, f"wb{uuid.uuid4().hex[:10]}", n)
                worker_s[n].append(seconds)
                worker_cpu[n].append(cpu)
                if pages and len(urls) != pages:
                    sys.exit(f"{n} worker(s) fetched {len(urls)} pages, {pages} before")
                pages = len(urls)
            seconds, cpu = await engine_round(args, site, urls)
            engine_s.append(seconds)
            engine_cpu.append(cpu)
            rates = ", ".join(f"{n} worker(s) {pages / worker_s[n][-1]:.0f}" for n in counts)
            print(f"round {i + 1}: {pages} pages; {rates}, engine {pages / engine_s[-1]:.0f} pages/s, load "
                  f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
    e = statistics.median(engine_s)
    print(f"{pages} pages ({len(KEYWORDS) * len(LOCATIONS)} paginated searches and their items' detail pages) "
          f"of the demo board, jobs at once {args.jobs}, pages in flight {args.page_concurrency} (per worker), loop "
          f"{args.loop}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; median of {args.rounds} "
          "interleaved rounds")
    ecpu = statistics.median(engine_cpu) / pages * 1e6
    print(f"{'client':<12}{'pages/s':>10}{'best':>8}{'seconds':>9}{'CPU us/page':>13}{'time/engine':>13}"
          f"{'CPU/engine':>12}{'vs 1 worker':>13}")
    print(f"{'engine':<12}{pages / e:>10.0f}{pages / min(engine_s):>8.0f}{e:>9.2f}{ecpu:>13.0f}")
    for n in counts:
        w, wcpu = statistics.median(worker_s[n]), statistics.median(worker_cpu[n]) / pages * 1e6
        one = f"{statistics.median(worker_s[1]) / w:>12.2f}x" if 1 in counts else ""
        print(f"{f'worker x{n}':<12}{pages / w:>10.0f}{pages / min(worker_s[n]):>8.0f}{w:>9.2f}{wcpu:>13.0f}"
              f"{w / e:>12.2f}x{wcpu / ecpu:>11.2f}x{one}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=8, help="jobs at once in the worker (--concurrency)")
    parser.add_argument("--page-concurrency", type=int, default=16)
    parser.add_argument("--processes", type=int, action="append",
                        help="worker processes sharing the work (repeat to compare, e.g. --processes 1 --processes 2)")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a worker round may take")
    parser.add_argument("--profile", action="store_true", help="run the worker under cProfile (stderr)")
    parser.add_argument("--postgres-url", default=os.environ.get(
        "CRAWLHERD_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--redis-url", default=os.environ.get("CRAWLHERD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    parser.add_argument("--engine-client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine_client:
        args.urls_file = args.engine_client
        run_engine_client(args)
        return
    asyncio.run(drive(args))


if __name__ == "__main__":
    main()
