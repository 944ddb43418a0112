"""Soak: the full pipeline for ``--minutes`` (default 30) under faults; not part of CI.

PostgreSQL (a scratch database) + RabbitMQ (behind a TCP proxy the soak cuts) + Redis (the workers'
shared frontier), ``--dispatchers`` ``crawlherd dispatch`` and ``--workers`` ``crawlherd worker``
processes, against the demo job board (:class:`crawlherd.demo.DemoSite`, served by this process):

- every ``--kill-every`` seconds (on average) one of those processes, picked at random, is SIGKILLed
  and started again a second or two later (``dispatch-1`` and ``worker-1`` are spared unless
  ``--no-spare``, so that the memory of one process of each kind is seen over the whole soak);
- every ``--outage-every`` seconds the broker goes away for ``--outage-for`` seconds (the proxy stops
  listening and resets every connection);
- a process that exits on its own is counted and started again.

The targets (the demo's searches, without the browser website) run every ``--every`` seconds from a
fixed anchor with ``misfire = "backfill"``, so that every slot that fell due during the faults must
run. After the faults the soak waits (up to ``--drain`` seconds) for every due slot to settle, stops
everything with SIGTERM and reports, as Markdown on stdout (``--json FILE`` for the raw figures):

- slots due (computed from the anchor and the interval) vs outbox rows vs job runs, by status;
- items expected (the site's own answer) vs stored, missing, unexpected; rows per fingerprint;
- duplicates: publishes per (target, slot) (must be one), jobs run more than once (redeliveries,
  allowed by at-least-once, absorbed by the run key), detail pages fetched more than once;
- the memory (RSS) of each process over its life, sampled every ``--sample-every`` seconds.

    python bench/soak.py --minutes 30
    python bench/soak.py --minutes 5 --json soak.json

Services: ``--postgres-url`` (a database server URL; a scratch database is created beside it and
dropped afterwards), ``--amqp-url``, ``--redis-url``; their defaults are the test suite's. Only
processes this script started are signalled, by their PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402
from tests._netutil import TcpProxy  # noqa: E402
from tests.support.real_brokers import delete_queues  # noqa: E402

from crawlherd.brokers import open_broker  # noqa: E402
from crawlherd.db import DispatchOutbox, JobRun, ScrapeTarget, StoredItem, create_engine, db_now, upgrade  # noqa: E402
from crawlherd.demo import DemoSite  # noqa: E402
from crawlherd.demo.targets import demo_targets, expected_results, targets_toml, without_browser  # noqa: E402
from crawlherd.dispatch.targets import import_targets  # noqa: E402


@dataclass
class Proc:
    """One supervised process slot (``worker-1``): the process now running in it and its history."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    logdir: Path
    proc: subprocess.Popen[bytes] | None = None
    generation: int = 0
    kills: int = 0
    own_exits: list[int] = field(default_factory=list)
    # (pid, seconds since the soak began, RSS in KiB)
    samples: list[tuple[int, float, int]] = field(default_factory=list)

    def start(self) -> None:
        self.generation += 1
        log = (self.logdir / f"{self.name}.{self.generation}.log").open("wb")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def terminate(self, timeout: float = 60.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def sample(self, now: float) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                self.samples.append((self.proc.pid, now, int(line.split()[1])))


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def create_database(server_url: str, name: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(server_url.replace("postgresql://", "postgres://", 1))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return server_url.rsplit("/", 1)[0] + "/" + name


async def drop_database(server_url: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(server_url.replace("postgresql://", "postgres://", 1))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def settled_through(engine: AsyncEngine, until: datetime) -> tuple[int, int]:
    """(job runs settled, outbox rows) for slots at or before ``until``."""
    async with engine.connect() as conn:
        settled = (
            await conn.execute(
                select(func.count())
                .select_from(JobRun)
                .where(JobRun.slot_at <= until, JobRun.status.in_(("succeeded", "dead")))
            )
        ).scalar_one()
        outbox = (
            await conn.execute(select(func.count()).select_from(DispatchOutbox).where(DispatchOutbox.slot_at <= until))
        ).scalar_one()
    return int(settled), int(outbox)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    run_id = f"soak_{uuid.uuid4().hex[:10]}"
    logdir = Path(tempfile.mkdtemp(prefix="crawlherd-soak-"))
    db_url = await create_database(args.postgres_url, run_id)
    await upgrade(db_url)
    engine = create_engine(db_url)
    procs: list[Proc] = []
    t0 = time.monotonic()
    events: list[tuple[float, str]] = []

    def event(what: str) -> None:
        events.append((round(time.monotonic() - t0, 1), what))
        print(f"[{time.monotonic() - t0:7.1f}s] {what}", file=sys.stderr, flush=True)

    amqp_host, _, amqp_port = args.amqp_url.split("@", 1)[1].split("/", 1)[0].partition(":")
    try:
        async with DemoSite(throttle_every=12) as site, TcpProxy(amqp_host, int(amqp_port or 5672)) as proxy:
            document = without_browser(demo_targets(site.url, every=f"{args.every}s"))
            async with engine.connect() as conn:
                anchor = (await db_now(conn)).replace(microsecond=0) + timedelta(seconds=15)
            for target in document["targets"]:
                target.update(start_at=anchor, misfire="backfill", backfill_limit=10_000, misfire_grace="1d")
            targets_file = logdir / "targets.toml"
            targets_file.write_text(targets_toml(document), encoding="utf-8")
            await import_targets(engine, targets_file)
            async with engine.connect() as conn:
                n_targets = (await conn.execute(select(func.count()).select_from(ScrapeTarget))).scalar_one()
            user, _, _ = args.amqp_url.partition("@")
            broker_url = f"{user}@127.0.0.1:{proxy.port}/?queue={run_id}"
            frontier_url = f"{args.redis_url}?prefix={run_id}_f"
            env = {
                **os.environ,
                "CRAWLHERD_DATABASE_URL": db_url,
                "CRAWLHERD_BROKER_URL": broker_url,
                "CRAWLHERD_FRONTIER_URL": frontier_url,
                "CRAWLHERD_LOG_LEVEL": "WARNING",
            }
            exe = [sys.executable, "-m", "crawlherd"]
            # --tracemalloc: the two long-lived processes log what grew (crawlherd._memtrace)
            traced = env
            if args.tracemalloc:
                traced = {**env, "CRAWLHERD_TRACEMALLOC": str(args.tracemalloc),
                          "CRAWLHERD_TRACEMALLOC_FRAMES": str(args.tracemalloc_frames),
                          "CRAWLHERD_TRACEMALLOC_TRIM": "1" if args.trim else ""}
            for i in range(args.dispatchers):
                cmd = [*exe, "dispatch", "--interval", "0.5", "-q"]
                procs.append(Proc(f"dispatch-{i + 1}", cmd, traced if i == 0 else env, logdir))
            for i in range(args.workers):
                cmd = [*exe, "worker", "--allow-private", "--concurrency", "2", "--backoff", "1"]
                procs.append(Proc(f"worker-{i + 1}", cmd, traced if i == 0 else env, logdir))
            for p in procs:
                p.start()
            event(
                f"{n_targets} targets every {args.every}s from {anchor:%H:%M:%S}; {len(procs)} processes; "
                f"logs in {logdir}"
            )

            end = time.monotonic() + args.minutes * 60
            outages = 0

            async def outages_loop() -> None:
                nonlocal outages
                while True:
                    await asyncio.sleep(args.outage_every)
                    outages += 1
                    event(f"broker outage {outages}: down for {args.outage_for}s")
                    await proxy.down()
                    try:
                        await asyncio.sleep(args.outage_for)
                    finally:
                        await proxy.up()
                    event("broker back")

            outage_task = asyncio.create_task(outages_loop(), name="soak-outages")
            # With --spare, the first dispatcher and the first worker are never SIGKILLed: their memory
            # is seen over the whole soak (they still face the broker outages).
            spared = {"dispatch-1", "worker-1"} if args.spare else set()
            next_kill = time.monotonic() + rng.expovariate(1 / args.kill_every)
            next_sample = time.monotonic()
            self_samples: list[tuple[float, int]] = []
            restarts: list[tuple[float, Proc]] = []

            def supervise(now: float) -> None:
                """Sample memory when due, start what is due to start, notice processes that exited."""
                nonlocal next_sample
                if now >= next_sample:
                    for p in procs:
                        p.sample(now - t0)
                    self_samples.append((now - t0, rss_kib()))
                    next_sample = now + args.sample_every
                for due, p in list(restarts):
                    if now >= due:
                        restarts.remove((due, p))
                        p.start()
                for p in procs:
                    if p.proc is not None and p.proc.poll() is not None and all(p is not q for _, q in restarts):
                        p.own_exits.append(p.proc.returncode)
                        event(f"{p.name} exited on its own with {p.proc.returncode}; starting it again in 1s")
                        restarts.append((now + 1, p))

            try:
                while time.monotonic() < end:
                    now = time.monotonic()
                    supervise(now)
                    if now >= next_kill:
                        victims = [p for p in procs if p.alive() and p.name not in spared]
                        victim = rng.choice(victims or [p for p in procs if p.name not in spared])
                        victim.kill()
                        restarts.append((now + rng.uniform(1, 3), victim))
                        event(f"SIGKILL {victim.name}")
                        next_kill = now + rng.expovariate(1 / args.kill_every)
                    await asyncio.sleep(0.5)
            finally:
                outage_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await outage_task
            for _, p in restarts:
                p.start()
            async with engine.connect() as conn:
                faults_end = await db_now(conn)
            slots_per_target = (
                int((faults_end - anchor).total_seconds() // args.every) + 1 if faults_end >= anchor else 0
            )
            due = n_targets * slots_per_target
            last_slot = anchor + timedelta(seconds=args.every * (slots_per_target - 1))
            event(f"faults over: {due} slots due ({slots_per_target} per target); draining")
            drain_end = time.monotonic() + args.drain
            while time.monotonic() < drain_end:
                settled, _ = await settled_through(engine, last_slot)
                if settled >= due:
                    break
                supervise(time.monotonic())
                await asyncio.sleep(1)
            drained_in = round(args.drain - (drain_end - time.monotonic()), 1)
            settle_end = time.monotonic() + 30  # every process running again before the final SIGTERM
            while time.monotonic() < settle_end and (restarts or not all(p.alive() for p in procs)):
                supervise(time.monotonic())
                await asyncio.sleep(0.5)
            await asyncio.sleep(3)  # let detail pages of the last listing pages finish
            codes = {p.name: p.terminate() for p in procs}
            event(f"stopped: {codes}")
            report = await measure(
                engine, site, document, anchor, last_slot, due, n_targets, slots_per_target, args.every
            )
            report.update(
                minutes=args.minutes,
                every=args.every,
                processes={
                    p.name: {"kills": p.kills, "own_exits": p.own_exits, "sigterm_exit": codes[p.name]} for p in procs
                },
                outages=outages,
                outage_for=args.outage_for,
                drained_in_s=drained_in,
                memory=memory_report(procs, self_samples),
                logs=scan_logs(logdir),
                memtrace=memtrace_lines(logdir),
                log_dir=str(logdir),
                events=events,
            )
            return report
    finally:
        for p in procs:
            p.terminate(10)
        await engine.dispose()
        await cleanup(args, run_id)
        await drop_database(args.postgres_url, run_id)


async def measure(
    engine: AsyncEngine,
    site: DemoSite,
    document: dict[str, Any],
    anchor: datetime,
    last_slot: datetime,
    due: int,
    n_targets: int,
    slots_per_target: int,
    every: int,
) -> dict[str, Any]:
    async with engine.connect() as conn:
        outbox = (
            await conn.execute(
                select(DispatchOutbox.target_id, DispatchOutbox.slot_at, DispatchOutbox.status).where(
                    DispatchOutbox.slot_at <= last_slot
                )
            )
        ).all()
        runs = (
            await conn.execute(
                select(JobRun.target_id, JobRun.slot_at, JobRun.status, JobRun.attempts).where(
                    JobRun.slot_at <= last_slot
                )
            )
        ).all()
        outbox_later = (
            await conn.execute(
                select(func.count()).select_from(DispatchOutbox).where(DispatchOutbox.slot_at > last_slot)
            )
        ).scalar_one()
        fingerprints = [row[0] for row in (await conn.execute(select(StoredItem.fingerprint))).all()]
    off_grid = sum(1 for r in outbox if ((r.slot_at - anchor).total_seconds() % every) > 0.001)
    expected = {fp for site_items in expected_results(site, document).values() for fp in site_items}
    stored = Counter(fingerprints)
    per_slot = Counter((r.target_id, r.slot_at) for r in outbox)
    details = Counter(r.path for r in site.log if r.path.startswith("/jobs/") and r.status == 200)
    return {
        "targets": n_targets,
        "slots_per_target": slots_per_target,
        "slots_due": due,
        "outbox_rows": len(outbox),
        "outbox_rows_by_status": dict(Counter(r.status for r in outbox)),
        "outbox_rows_after_last_slot": int(outbox_later),
        "outbox_rows_off_grid": int(off_grid),
        "publishes_per_slot_max": max(per_slot.values(), default=0),
        "job_runs": len(runs),
        "job_runs_by_status": dict(Counter(r.status for r in runs)),
        "jobs_run_more_than_once": sum(1 for r in runs if r.attempts > 1),
        "attempts_max": max((r.attempts for r in runs), default=0),
        "items_expected": len(expected),
        "items_stored": len(stored),
        "items_missing": len(expected - set(stored)),
        "items_unexpected": len(set(stored) - expected),
        "item_rows_per_fingerprint_max": max(stored.values(), default=0),
        "detail_pages": len(details),
        "detail_fetches": sum(details.values()),
        "detail_pages_fetched_twice_or_more": sum(1 for n in details.values() if n > 1),
        "site_requests": len(site.log),
        "site_429s": site.log.count(status=429),
    }


def memory_report(procs: list[Proc], self_samples: list[tuple[float, int]]) -> dict[str, Any]:
    """Per process (slot, pid): lifetime, RSS at +30 s of its life (after warm-up), at its end, max."""
    out: dict[str, Any] = {}
    for p in procs:
        by_pid: dict[int, list[tuple[float, int]]] = {}
        for pid, t, kib in p.samples:
            by_pid.setdefault(pid, []).append((t, kib))
        lives = []
        for pid, samples in by_pid.items():
            start = samples[0][0]
            warm = [kib for t, kib in samples if t >= start + 30] or [samples[-1][1]]
            lives.append(
                {
                    "pid": pid,
                    "from_s": round(start),
                    "lived_s": round(samples[-1][0] - start),
                    "rss_warm_mib": round(warm[0] / 1024, 1),
                    "rss_end_mib": round(samples[-1][1] / 1024, 1),
                    "rss_max_mib": round(max(k for _, k in samples) / 1024, 1),
                    "growth_mib": round((samples[-1][1] - warm[0]) / 1024, 1),
                    "series_mib": [round(k / 1024, 1) for _, k in samples[:: max(1, len(samples) // 12)]],
                }
            )
        out[p.name] = lives
    if self_samples:
        out["soak (site + proxy)"] = [
            {
                "pid": os.getpid(),
                "from_s": 0,
                "lived_s": round(self_samples[-1][0]),
                "rss_warm_mib": round(self_samples[min(len(self_samples) - 1, 3)][1] / 1024, 1),
                "rss_end_mib": round(self_samples[-1][1] / 1024, 1),
                "rss_max_mib": round(max(k for _, k in self_samples) / 1024, 1),
                "growth_mib": round((self_samples[-1][1] - self_samples[min(len(self_samples) - 1, 3)][1]) / 1024, 1),
                "series_mib": [round(k / 1024, 1) for _, k in self_samples[:: max(1, len(self_samples) // 12)]],
            }
        ]
    return out


def scan_logs(logdir: Path) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for path in logdir.glob("*.log"):
        body = path.read_text(errors="replace")
        counts["tracebacks"] += body.count("Traceback (most recent call last)")
        counts["error_lines"] += sum(1 for line in body.splitlines() if " ERROR " in line or line.startswith("ERROR"))
        counts["warning_lines"] += sum(
            1 for line in body.splitlines() if "WARNING" in line and "crawlherd.memtrace" not in line
        )
    return dict(counts)


def memtrace_lines(logdir: Path) -> dict[str, list[str]]:
    """The memory lines (``--tracemalloc``) of each process's log, without their timestamp prefix."""
    out: dict[str, list[str]] = {}
    for path in sorted(logdir.glob("*.log")):
        lines = [
            line.split("crawlherd.memtrace: ", 1)[1]
            for line in path.read_text(errors="replace").splitlines()
            if "crawlherd.memtrace: " in line
        ]
        if lines:
            out[path.stem] = lines
    return out


async def cleanup(args: argparse.Namespace, run_id: str) -> None:
    try:
        async with open_broker(f"{args.amqp_url}?queue={run_id}") as broker:
            await delete_queues(broker)
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort; say so
        print(f"could not delete the soak's queues: {exc}", file=sys.stderr)
    await delete_redis_keys(args.redis_url, run_id)


async def delete_redis_keys(redis_url: str, prefix: str) -> None:
    """Delete the keys under ``prefix`` (a run's own)."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


def markdown(r: dict[str, Any]) -> str:
    lines = [
        f"Soak of {r['minutes']} minutes: {r['targets']} targets every {r['every']}s, "
        f"{sum(p['kills'] for p in r['processes'].values())} SIGKILLs, {r['outages']} broker outages of "
        f"{r['outage_for']}s; drained in {r['drained_in_s']}s.",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| slots due ({r['slots_per_target']} per target) | {r['slots_due']} |",
        f"| outbox rows for them | {r['outbox_rows']} {r['outbox_rows_by_status']} |",
        f"| publishes per (target, slot), max | {r['publishes_per_slot_max']} |",
        f"| job runs for them | {r['job_runs']} {r['job_runs_by_status']} |",
        f"| jobs run more than once (redelivered) | {r['jobs_run_more_than_once']} "
        f"(max attempts {r['attempts_max']}) |",
        f"| items expected / stored | {r['items_expected']} / {r['items_stored']} |",
        f"| items missing / unexpected | {r['items_missing']} / {r['items_unexpected']} |",
        f"| item rows per fingerprint, max | {r['item_rows_per_fingerprint_max']} |",
        f"| detail pages / fetches / fetched twice or more | {r['detail_pages']} / {r['detail_fetches']} / "
        f"{r['detail_pages_fetched_twice_or_more']} |",
        f"| site requests (429s) | {r['site_requests']} ({r['site_429s']}) |",
        f"| processes exiting on their own | "
        f"{ {k: v['own_exits'] for k, v in r['processes'].items() if v['own_exits']} or 'none' } |",
        f"| log: tracebacks / ERROR lines / WARNING lines | {r['logs'].get('tracebacks', 0)} / "
        f"{r['logs'].get('error_lines', 0)} / {r['logs'].get('warning_lines', 0)} |",
        "",
        "Memory (RSS, MiB) of each process over its life: after 30 s, at its end, max; the series samples it.",
        "",
        "| process | pid | from (s) | lived (s) | +30 s | end | max | growth after +30 s | series |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, lives in r["memory"].items():
        for life in lives:
            lines.append(
                f"| {name} | {life['pid']} | {life['from_s']} | {life['lived_s']} | {life['rss_warm_mib']} | "
                f"{life['rss_end_mib']} | {life['rss_max_mib']} | {life['growth_mib']:+} | "
                f"{' '.join(map(str, life['series_mib']))} |"
            )
    for name, trace in r.get("memtrace", {}).items():
        lines += ["", f"{name}: memory lines (--tracemalloc), first, then every fifth, and the last:", ""]
        picked = trace[:1] + trace[1:-1][4::5] + trace[-1:] if len(trace) > 1 else trace
        lines += [f"    {line.splitlines()[0]}" for line in picked]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=int, default=60, help="Seconds between two slots of a target.")
    parser.add_argument("--dispatchers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=45.0, help="Mean seconds between two SIGKILLs.")
    parser.add_argument("--outage-every", type=float, default=150.0)
    parser.add_argument("--outage-for", type=float, default=15.0)
    parser.add_argument("--drain", type=float, default=600.0, help="Seconds to wait for the due slots to settle.")
    parser.add_argument("--sample-every", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--spare",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Never SIGKILL dispatch-1 and worker-1 (their memory is then seen over the whole soak).",
    )
    parser.add_argument(
        "--tracemalloc",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="dispatch-1 and worker-1 log their allocation growth every SECONDS (CRAWLHERD_TRACEMALLOC).",
    )
    parser.add_argument(
        "--tracemalloc-frames",
        type=int,
        default=6,
        help="Frames per traced allocation; 0: no tracing, only RSS, Python blocks and malloc's figures.",
    )
    parser.add_argument(
        "--trim",
        action="store_true",
        help="With --tracemalloc: the two processes call malloc_trim(0) before each report, so their RSS counts "
        "only what they hold (CRAWLHERD_TRACEMALLOC_TRIM).",
    )
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--json", type=Path, default=None, help="Write the raw figures there too.")
    args = parser.parse_args()
    report = asyncio.run(soak(args))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    print(markdown(report))


if __name__ == "__main__":
    main()
