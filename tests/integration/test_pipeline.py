"""The whole pipeline, end to end: targets in the config DB become items, on the embedded defaults
and scaled out (PostgreSQL + RabbitMQ or Redis Streams, several worker processes), surviving a worker
killed with -9, and a site that always fails ending dead (and sent again on request)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.brokers import open_broker
from crawlherd.cli import main as cli
from crawlherd.cli.demo import _demo
from crawlherd.db import JobRun, ScrapeTarget, StoredItem, create_engine, upgrade
from crawlherd.db.models import JobAttempt
from crawlherd.demo import DemoSite
from crawlherd.demo.targets import demo_targets, expected_results, targets_toml, without_browser
from crawlherd.dispatch.dispatch_service import DispatchService
from crawlherd.dispatch.embedded import progress_of, run_embedded
from crawlherd.dispatch.targets import import_targets
from crawlherd.fetch.base import FetchLimits
from crawlherd.sinks import DETAIL_AT, MemorySink
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.conftest import REDIS_URL
from tests.support import forkpopen
from tests.support.demo import failing_targets
from tests.support.real_brokers import delete_queues

pytestmark = pytest.mark.slow


def one_browse_search(document: dict[str, Any]) -> dict[str, Any]:
    """The demo's ``demo-jobs-browse`` website alone, with one search (rust, berlin)."""
    return {
        "websites": [w for w in document["websites"] if w["name"] == "demo-jobs-browse"],
        "targets": [
            t | {"keywords": ["rust"], "locations": ["berlin"]}
            for t in document["targets"]
            if t["website"] == "demo-jobs-browse"
        ],
    }


async def load_targets(engine: AsyncEngine, document: dict[str, Any], tmp_path: Path) -> None:
    """Import ``document`` and make every target due now."""
    path = tmp_path / f"targets-{time.monotonic_ns()}.toml"
    path.write_text(targets_toml(document), encoding="utf-8")
    await import_targets(engine, path)
    async with engine.begin() as conn:
        await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC) - timedelta(seconds=1)))


_ROW_KEYS = {"website", "url", "fingerprint", "first_seen", "last_seen"}


async def stored_items(engine: AsyncEngine) -> dict[str, dict[str, dict[str, Any]]]:
    """website -> item fingerprint (hex) -> {"url", "fields"}: the shape of ``expected_results``."""
    from crawlherd.sinks.export import iter_items

    out: dict[str, dict[str, dict[str, Any]]] = {}
    async for item in iter_items(engine):
        fields = {k: v for k, v in item.items() if k not in _ROW_KEYS}
        out.setdefault(item["website"], {})[item["fingerprint"]] = {"url": item["url"], "fields": fields}
    return out


def _difference(got: dict[str, Any], expected: dict[str, Any]) -> str:
    """The first differences, readable (pytest's own diff of these nested dicts is cut short)."""
    lines = []
    for website in sorted(set(got) | set(expected)):
        g, e = got.get(website, {}), expected.get(website, {})
        for key in sorted(set(g) | set(e)):
            if g.get(key) != e.get(key):
                lines.append(f"{website} {key}: stored {g.get(key)!r} != listed {e.get(key)!r}")
    return f"{len(lines)} item(s) differ:\n" + "\n".join(lines[:5])


async def assert_items_match(engine: AsyncEngine, site: DemoSite, document: dict[str, Any], *, wait: float = 0) -> None:
    """Every item the site lists, with every field its rules read (detail pages included), stored once.
    ``wait``: seconds to let detail pages still in flight land first."""
    expected = expected_results(site, document)
    deadline = time.monotonic() + wait
    while (got := await stored_items(engine)) != expected and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.3)
    assert got == expected, _difference(got, expected)
    pairs = select(StoredItem.website_id, StoredItem.url).distinct().subquery()
    async with engine.connect() as conn:
        rows = (await conn.execute(select(func.count()).select_from(StoredItem))).scalar_one()
        distinct = (await conn.execute(select(func.count()).select_from(pairs))).scalar_one()
    assert rows == distinct == sum(len(v) for v in expected.values())  # no item stored twice


async def wait_settled(engine: AsyncEngine, timeout: float) -> None:
    """Until every job dispatched so far is settled (no dispatcher runs here: a target falling due
    meanwhile -- an hourly slot passing -- does not count)."""
    deadline = time.monotonic() + timeout
    while True:
        progress = await progress_of(engine)
        if progress.all_settled:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs not settled in {timeout}s: {progress}")
        await asyncio.sleep(0.3)


# -- 1. embedded defaults ------------------------------------------------------------------------


async def test_demo_on_the_embedded_defaults_stores_every_item(
    tmp_path: Path, shared_chromium: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`crawlherd demo`: one SQLite file for config, broker and items; the JavaScript listing too."""
    monkeypatch.setenv("CRAWLHERD_CHROMIUM_CDP_URL", shared_chromium)  # the process's Chromium, not a launch
    workdir = tmp_path / "demo"
    summary = await _demo(workdir, timeout=240, concurrency=4, no_browser=False, console=Console(quiet=True))
    assert summary["ok"] is True
    engine = create_engine(f"sqlite:///{workdir / 'demo.db'}")
    try:
        got = await stored_items(engine)
        async with DemoSite(throttle_every=12) as site:  # same seed: the same job board
            expected = expected_results(site, demo_targets(site.url))

        # item URLs (so fingerprints) carry the site's port, which differs: compare the fields
        def fields(items: dict[str, dict[str, dict[str, Any]]]) -> dict[str, list[str]]:
            return {w: sorted(repr(sorted(v["fields"].items())) for v in by.values()) for w, by in items.items()}

        assert fields(got) == fields(expected)
        assert len(got["demo-jobs-js"]) > 0  # the JavaScript-rendered listing, through Chromium
        runs = await progress_of(engine)
        assert runs.succeeded == runs.jobs > 0
        assert runs.dead == 0
    finally:
        await engine.dispose()


def test_demo_command_reports_as_json(tmp_path: Path) -> None:
    """(Its report for people: ``tests/integration/console/test_demo_console.py``, which runs the plain demo.)"""
    as_json = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "j"), "--no-browser", "--timeout", "240",
                                       "--json"])
    assert as_json.exit_code == 0, as_json.output
    summary = json.loads(as_json.stdout)
    assert summary["ok"] is True and summary["jobs/dead"] == 0 and summary["settled"] is True
    assert {w: (v["missing"], v["extra"]) for w, v in summary["websites"].items()} == {
        "demo-jobs": (0, 0), "demo-jobs-browse": (0, 0)}
    assert summary["websites"]["demo-jobs"]["stored"] == summary["websites"]["demo-jobs"]["listed"] > 0


# -- 2. scaled out: PostgreSQL + a real broker + three worker processes -----------------------------


@pytest.fixture(params=["amqp", "redis"])
def broker_url(request: pytest.FixtureRequest, unique_name: str) -> str:
    if request.param == "amqp":
        return f"{request.getfixturevalue('amqp_url')}?queue={unique_name}"
    return f"{request.getfixturevalue('redis_url')}?prefix={unique_name}&claim_idle=5"


def start_workers(
    n: int, database_url: str, broker_url: str, frontier_url: str, *extra: str
) -> list[forkpopen.Process]:
    env = {
        **os.environ,
        "CRAWLHERD_DATABASE_URL": database_url,
        "CRAWLHERD_BROKER_URL": broker_url,
        "CRAWLHERD_FRONTIER_URL": frontier_url,
    }
    cmd = [
        sys.executable,
        "-m",
        "crawlherd",
        "worker",
        "--allow-private",
        "--concurrency",
        "2",
        "--backoff",
        "0.5",
        *extra,
    ]
    return [forkpopen.popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(n)]


def stop_workers(procs: list[forkpopen.Process]) -> list[str]:
    outputs = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outputs.append(out.decode(errors="replace"))
    return outputs


@pytest.fixture
def frontier_url(redis_url: str, unique_name: str) -> str:
    """A Redis frontier shared by the worker processes (its keys are deleted afterwards)."""
    return f"{redis_url}?prefix={unique_name}f"


@pytest.fixture
async def scaled(
    postgres_db_url: str, broker_url: str, frontier_url: str
) -> AsyncIterator[tuple[AsyncEngine, str, str, str]]:
    engine = create_engine(postgres_db_url)
    await upgrade(engine)
    try:
        yield engine, postgres_db_url, broker_url, frontier_url
    finally:
        # Leave nothing behind on the shared services: the broker's queues or keys, the frontier's keys.
        async with open_broker(broker_url) as broker:
            await delete_queues(broker)
        import redis.asyncio as aioredis

        client = aioredis.from_url(REDIS_URL)
        try:
            prefix = broker_url.partition("prefix=")[2].partition("&")[0] or None
            for pattern in filter(None, [prefix, frontier_url.partition("prefix=")[2]]):
                keys = [k async for k in client.scan_iter(match=f"{pattern}*", count=1000)]
                if keys:
                    await client.delete(*keys)
        finally:
            await client.aclose()
        await engine.dispose()


async def dispatch_once(engine: AsyncEngine, broker_url: str) -> int:
    async with open_broker(broker_url) as broker:
        tick, relay = await DispatchService(engine, broker).run_once()
    assert relay.failed == 0
    return tick.inserted


async def test_three_worker_processes_on_postgres_and_a_real_broker(
    scaled: tuple[AsyncEngine, str, str, str], tmp_path: Path
) -> None:
    """PostgreSQL + RabbitMQ (or Redis Streams) + a Redis frontier, three `crawlherd worker` processes."""
    engine, database_url, broker_url, frontier_url = scaled
    async with DemoSite(throttle_every=12) as site:
        document = without_browser(demo_targets(site.url))
        await load_targets(engine, document, tmp_path)
        jobs = await dispatch_once(engine, broker_url)
        assert jobs == len(document["targets"][0]["keywords"]) * 4 + 4
        procs = start_workers(3, database_url, broker_url, frontier_url)
        try:
            await wait_settled(engine, timeout=180)
            await assert_items_match(engine, site, document, wait=60)  # detail pages included
        finally:
            outputs = stop_workers(procs)
        assert all("worker stopped" in out for out in outputs), outputs
        dumps = [json.loads(out.split("; statistics: ", 1)[1].split("\n", 1)[0]) for out in outputs]
        detail_pages = [stats["pages/detail"] for stats in dumps]
        assert sum(detail_pages) == 80  # each detail page fetched once, across the three workers
        progress = await progress_of(engine)
        assert progress.succeeded == jobs
        async with engine.connect() as conn:
            workers = (await conn.execute(select(func.count(func.distinct(JobRun.worker))))).scalar_one()
        assert workers >= 2  # the work was shared


# -- 3. a worker killed with -9 in the middle of a job ---------------------------------------------


async def test_worker_killed_mid_job_is_redelivered_and_completed(
    scaled: tuple[AsyncEngine, str, str, str], tmp_path: Path
) -> None:
    engine, database_url, broker_url, frontier_url = scaled
    # Every listing page answers 429 (Retry-After 1 s) at first: jobs take seconds, so one is in flight.
    async with DemoSite(throttle_every=1, retry_after=1) as site:
        document = without_browser(demo_targets(site.url))
        document["targets"] = [document["targets"][0] | {"keywords": ["python", "rust"], "locations": ["berlin"]}]
        document["websites"] = [w for w in document["websites"] if w["name"] == "demo-jobs"]
        await load_targets(engine, document, tmp_path)
        jobs = await dispatch_once(engine, broker_url)
        victim = start_workers(1, database_url, broker_url, frontier_url)[0]
        try:
            deadline = time.monotonic() + 60
            while True:  # wait until the victim holds a running job
                async with engine.connect() as conn:
                    running = (
                        await conn.execute(
                            select(func.count())
                            .select_from(JobRun)
                            .where(JobRun.status == "running", JobRun.worker.like(f"%:{victim.pid}"))
                        )
                    ).scalar_one()
                if running:
                    break
                assert time.monotonic() < deadline, "the worker never started a job"
                await asyncio.sleep(0.05)
            victim.kill()  # SIGKILL: no clean-up at all
            victim.wait()
            survivors = start_workers(1, database_url, broker_url, frontier_url)
            try:
                await wait_settled(engine, timeout=180)
            finally:
                stop_workers(survivors)
        finally:
            stop_workers([victim])
        await assert_items_match(engine, site, document)
        assert (await progress_of(engine)).succeeded == jobs


# -- 4. a site that fails every time ---------------------------------------------------------------


async def test_failing_site_goes_dead_with_growing_delays_and_can_be_sent_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="crawlherd.worker")
    db_url = f"sqlite:///{tmp_path / 'fail.db'}"
    engine = create_engine(db_url)
    await upgrade(engine)
    try:
        async with DemoSite() as site, open_broker(db_url) as broker:
            await load_targets(engine, failing_targets(site.url), tmp_path)
            limits = FetchLimits(allow_private_addresses=True)
            worker = Worker(
                engine,
                broker,
                WorkerOptions(max_attempts=3, backoff=1.0, max_backoff=10.0, limits=limits),
            )
            async with worker:
                await run_embedded(
                    engine, broker, worker, stop=asyncio.Event(), interval=0.1, until_idle=True, progress_every=0.1
                )
            fails = [e.time for e in site.log if e.path.startswith("/fail/")]
            assert len(fails) == 3
            # Exponential back-off: about 1 s, then about 2 s (each +-20% jitter), as the worker said;
            # the site saw each retry no sooner than that (later on a loaded machine: no upper bound).
            delays = [float(m[1]) for r in caplog.records if (m := re.search(r"retrying in ([\d.]+)s", r.getMessage()))]
            assert len(delays) == 2 and 0.75 <= delays[0] <= 1.25 and 1.55 <= delays[1] <= 2.45, delays
            gaps = [fails[1] - fails[0], fails[2] - fails[1]]
            assert all(gap >= delay - 0.05 for gap, delay in zip(gaps, delays, strict=True)), (gaps, delays)
            async with engine.connect() as conn:
                run = (await conn.execute(select(JobRun.status, JobRun.attempts, JobRun.error))).one()
            assert run.status == "dead"
            assert run.attempts == 3
            assert "500" in (run.error or "")
            assert [d.key for d in await broker.dead_letters()] != []

        runner = CliRunner()

        async def invoke(*args: str) -> Any:  # the commands run their own event loop: not in ours
            return await asyncio.to_thread(runner.invoke, cli, list(args))

        listed = await invoke("jobs", "dead", "--database-url", db_url)
        assert listed.exit_code == 0, listed.output
        assert "500" in listed.output
        sent = await invoke("jobs", "retry", "--all", "--database-url", db_url, "--broker-url", db_url)
        assert sent.exit_code == 0, sent.output
        assert "sent 1 job(s) again" in sent.output
        async with engine.connect() as conn:
            assert (await conn.execute(select(JobRun.status))).scalar_one() == "queued"
            # the three failed attempts stay, numbered out of the next round's way (as the console's retry)
            kept = (await conn.execute(select(JobAttempt.attempt, JobAttempt.error).order_by(JobAttempt.attempt))).all()
        assert [a for a, _ in kept] == [-2, -1, 0] and all("500" in (e or "") for _, e in kept), kept
        async with open_broker(db_url) as broker:
            assert await broker.pending() == 1
        nothing = await invoke("jobs", "retry", "--database-url", db_url)
        assert nothing.exit_code != 0
        assert "RUN_IDS" in nothing.output
    finally:
        await engine.dispose()


async def test_invalid_message_is_dead_lettered_not_crashed_on(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'bad.db'}"
    engine = create_engine(db_url)
    await upgrade(engine)
    try:
        async with open_broker(db_url) as broker:
            await broker.publish(b'{"schema_version": 99}', key="x:1")
            await broker.publish(b"not json", key="x:2")
            worker = Worker(engine, broker)
            stop = asyncio.Event()
            async with worker:
                task = asyncio.create_task(worker.run(stop))
                while worker.stats.invalid < 2:  # noqa: ASYNC110 - polling the worker's counters
                    await asyncio.sleep(0.05)
                stop.set()
                await task
            reasons = sorted(d.reason for d in await broker.dead_letters())
            assert any("schema_version 99" in r for r in reasons)
            assert any("not valid JSON" in r for r in reasons)
    finally:
        await engine.dispose()


async def test_run_command_on_the_embedded_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`crawlherd targets import` then `crawlherd run --until-idle`: one SQLite file (config, broker,
    items) and the frontier beside it; then `crawlherd items export`."""
    monkeypatch.chdir(tmp_path)  # the embedded default is ./crawlherd.db
    monkeypatch.delenv("CRAWLHERD_DATABASE_URL", raising=False)
    monkeypatch.delenv("CRAWLHERD_BROKER_URL", raising=False)
    monkeypatch.delenv("CRAWLHERD_FRONTIER_URL", raising=False)
    runner = CliRunner()

    async def invoke(*args: str) -> Any:
        return await asyncio.to_thread(runner.invoke, cli, list(args))

    async with DemoSite(throttle_every=0) as site:
        document = without_browser(demo_targets(site.url))
        (tmp_path / "targets.toml").write_text(targets_toml(document), encoding="utf-8")
        imported = await invoke("targets", "import", "targets.toml")
        assert imported.exit_code == 0, imported.output
        nothing_due = await invoke("run", "--until-idle", "--allow-private")
        assert nothing_due.exit_code == 0, nothing_due.output
        assert '"jobs/dispatched": 0,' in nothing_due.output  # first slots are in the future: idle at once
        engine = create_engine("sqlite:///crawlherd.db")
        try:
            async with engine.begin() as conn:
                await conn.execute(update(ScrapeTarget).values(next_run_at=datetime.now(UTC) - timedelta(seconds=1)))
            ran = await invoke("run", "--until-idle", "--allow-private", "--interval", "0.2")
            assert ran.exit_code == 0, ran.output
            assert "console: http://127.0.0.1:" in ran.output  # `run` serves the console
            await assert_items_match(engine, site, document)
        finally:
            await engine.dispose()
    assert (tmp_path / "crawlherd-frontier.db").exists()
    exported = await invoke("items", "export", "--format", "csv", "-o", "items.csv")
    assert exported.exit_code == 0, exported.output
    lines = (tmp_path / "items.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + sum(len(v) for v in expected_results(site, document).values())
    assert lines[0].startswith("website,url,fingerprint,first_seen,last_seen")


async def test_detail_pages_seen_in_an_earlier_run_are_not_fetched_again(tmp_path: Path) -> None:
    """Two runs of one target: the second fetches its listing again but none of the detail pages (the
    frontier's persistent duplicate filter); with a revisit age of 1 s, a third run fetches them again."""
    db_url = f"sqlite:///{tmp_path / 'revisit.db'}"
    engine = create_engine(db_url)
    await upgrade(engine)
    try:
        async with DemoSite(throttle_every=0) as site:
            document = one_browse_search(demo_targets(site.url))

            async def one_run() -> tuple[int, int]:
                await load_targets(engine, document, tmp_path)
                async with open_broker(db_url) as broker:
                    worker = Worker(
                        engine,
                        broker,
                        WorkerOptions(
                            limits=FetchLimits(allow_private_addresses=True),
                            frontier_url=f"sqlite:///{tmp_path / 'frontier.db'}",
                        ),
                    )
                    async with worker:
                        await run_embedded(
                            engine,
                            broker,
                            worker,
                            stop=asyncio.Event(),
                            interval=0.1,
                            until_idle=True,
                            progress_every=0.1,
                        )
                return site.log.count(prefix="/browse/"), site.log.count(prefix="/jobs/")

            listings_1, details_1 = await one_run()
            await assert_items_match(engine, site, document)
            assert details_1 > 0
            listings_2, details_2 = await one_run()
            assert listings_2 > listings_1  # the listing is fetched every run ...
            assert details_2 == details_1  # ... the detail pages only once
            document["websites"][0]["revisit_age"] = 1
            await asyncio.sleep(1.1)  # the next revisit period (not a timing assertion)
            _, details_3 = await one_run()
            assert details_3 == 2 * details_1  # a new period: fetched again
    finally:
        await engine.dispose()


async def test_a_worker_with_a_memory_sink_stores_its_items_there(tmp_path: Path) -> None:
    """``Worker(sink=)``: listing and detail items go to the sink given, not to the items table."""
    db_url = f"sqlite:///{tmp_path / 'sink.db'}"
    engine = create_engine(db_url)
    await upgrade(engine)
    try:
        async with DemoSite(throttle_every=0) as site:
            document = one_browse_search(demo_targets(site.url))
            await load_targets(engine, document, tmp_path)
            sink = MemorySink()
            async with open_broker(db_url) as broker:
                worker = Worker(
                    engine,
                    broker,
                    WorkerOptions(limits=FetchLimits(allow_private_addresses=True)),
                    sink=sink,
                )
                async with worker:
                    await run_embedded(
                        engine, broker, worker, stop=asyncio.Event(), interval=0.1, until_idle=True, progress_every=0.1
                    )
            (expected,) = expected_results(site, document).values()
            got = {
                r.fingerprint.hex(): {"url": r.url, "fields": {k: v for k, v in r.fields.items() if k != DETAIL_AT}}
                for r in sink.records()
            }
            assert expected and got == expected
            assert all(DETAIL_AT in r.fields for r in sink.records())  # the detail pages went there too
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(StoredItem))).scalar_one() == 0
    finally:
        await engine.dispose()
