"""Metrics: after a real pipeline run (dispatcher + relay + worker against the demo site), the job,
page and item counters served on /metrics equal what the config DB holds; and each long-running
command (dispatch, worker, web) serves /metrics that prometheus_client's parser reads."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from crawlherd import DemoSite
from crawlherd.brokers import open_broker
from crawlherd.console.run_now import run_now
from crawlherd.db import create_engine, upgrade
from crawlherd.db.models import DispatchOutbox, JobAttempt, JobRun, StoredItem
from crawlherd.dispatch.embedded import run_embedded
from crawlherd.fetch.base import FetchLimits
from crawlherd.metrics import serve_metrics
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.support import forkpopen
from tests.support.console import add_site, add_target


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
        assert response.status == 200
        return samples(await response.text())


def value(s: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return s.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_counters_equal_the_database_after_a_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    await upgrade(url)
    engine = create_engine(url)
    port = serve_metrics(0)
    before = await scrape(port)
    try:
        async with DemoSite(seed=7, throttle_every=0) as site:
            await add_site(engine, "demo", site.url)
            await add_site(engine, "broken", site.url, path="/fail/search")
            targets = [await add_target(engine, "demo", kw, "berlin") for kw in ("python", "rust", "data")]
            targets.append(await add_target(engine, "broken", "python", "berlin"))
            for tid in targets:
                await run_now(engine, tid, requested_by="test")
            async with open_broker(url) as broker:
                worker = Worker(
                    engine,
                    broker,
                    WorkerOptions(
                        limits=FetchLimits(allow_private_addresses=True),
                        max_attempts=2,
                        backoff=0.0,
                        max_backoff=0.0,
                    ),
                )
                async with worker:
                    progress = await asyncio.wait_for(
                        run_embedded(engine, broker, worker, stop=asyncio.Event(), interval=0.05, until_idle=True),
                        120,
                    )
        assert (progress.succeeded, progress.dead) == (3, 1)
        after = await scrape(port)
        async with engine.connect() as conn:
            runs = dict((await conn.execute(select(JobRun.status, func.count()).group_by(JobRun.status))).all())
            pages = (await conn.execute(select(func.sum(JobRun.pages)))).scalar_one()
            items = (await conn.execute(select(func.count()).select_from(StoredItem))).scalar_one()
            retried = (await conn.execute(select(func.count()).where(JobAttempt.status == "failed"))).scalar_one()
            published = (
                await conn.execute(select(func.count()).where(DispatchOutbox.status == "published"))
            ).scalar_one()
    finally:
        await engine.dispose()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("crawlherd_jobs_total", outcome="succeeded") == runs["succeeded"] == 3
    assert delta("crawlherd_jobs_total", outcome="dead") == runs["dead"] == 1
    assert delta("crawlherd_jobs_total", outcome="retried") == retried == 1
    assert delta("crawlherd_job_pages_total") == pages > 0
    assert delta("crawlherd_items_total", change="new") == items > 0
    assert delta("crawlherd_dispatch_lag_seconds_count") == published == 4
    assert delta("crawlherd_relay_publishes_total", outcome="confirmed") == published
    assert delta("crawlherd_job_duration_seconds_count") == 3 + 1 + 1
    assert delta("crawlherd_fetches_total", status_class="2xx") == pages
    assert delta("crawlherd_fetches_total", status_class="5xx") == 2


def _start(args: list[str], env: dict[str, str]) -> tuple[forkpopen.Process, int]:
    proc = forkpopen.popen(
        [sys.executable, "-c", "from crawlherd.cli import main; main()", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"metrics: http://127\.0\.0\.1:(\d+)/metrics", line)
        if found:
            return proc, int(found.group(1))
    raise AssertionError(f"{args[0]} never served metrics; exit {proc.wait()}")


@pytest.mark.slow
async def test_each_process_serves_metrics(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    await upgrade(url)
    env = {**os.environ, "CRAWLHERD_DATABASE_URL": url}
    expected = {
        "dispatch": "crawlherd_targets_due",
        "worker": "crawlherd_jobs_in_flight",
        "web": "crawlherd_jobs_total",
    }
    procs = []
    try:
        for command, metric in expected.items():
            extra = ["--port", "0"] if command == "web" else []
            proc, port = _start([command, *extra, "--metrics-port", "0"], env)
            procs.append(proc)
            found = await scrape(port)
            assert any(name == metric for name, _ in found), (command, sorted(found)[:5])
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in procs]
        for proc in procs:
            if proc.stderr is not None:
                proc.stderr.close()
        assert codes == [0] * len(procs), codes
