"""One definition per counter (issue 23): after a run on the demo site, the jobs, pages and items
agree across the status line, the statistics (JSON), the console (its overview page and JSON, each
job's row) and the metrics (``/metrics``).

Today's code disagreed: the demo said "80 updated" (a detail page completing its own new item counted
as an update) while the console said "items updated (24 h): 0"; the console showed a worker with
"jobs 0" (the jobs in its hands now) after it ran them all; ``run``'s status line counted every job in
the database.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from crawlherd.demo import DemoSite
from tests._netutil import free_port
from tests.support.cli import dumped, invoke
from tests.support.processes import CliProcess, wait_until

STATUS = re.compile(r"^\d\d:\d\d:\d\d pages (\d+) \([\d.]+/min\), items (\d+) \([\d.]+/min\); jobs (\d+) done",
                    re.MULTILINE)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - the test's own loopback server
        return str(answer.read().decode())


def _metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([\d.e+]+)$", text, re.MULTILINE)
    assert match, f"{name}{labels} not in /metrics"
    return float(match.group(1))


@pytest.mark.timeout(120)
async def test_every_counter_agrees_after_a_demo_run(
    demo_pipeline: tuple[DemoSite, dict[str, str], int], tmp_path: Path
) -> None:
    _site, env, items = demo_pipeline
    metrics_port = free_port()
    proc = CliProcess(["run", "--allow-private", "--console-port", "0", "--metrics-port", str(metrics_port)],
                      tmp_path / "run.log", env={**env, "CRAWLHERD_HEARTBEAT_INTERVAL": "0.2"})
    await proc.start()
    try:
        async def console_url() -> bool:
            return "console: http://" in proc.log

        await wait_until(console_url, alive=[proc])
        console = re.search(r"console: (http://\S+?)/?$", proc.log, re.MULTILINE)
        assert console is not None
        base = console.group(1)
        overview: dict[str, Any] = {}

        async def settled() -> bool:
            """Both jobs succeeded, the frontier is empty, and the worker's row on the console (its last
            heartbeat) says what its last status line says."""
            nonlocal overview
            overview = json.loads(_get(f"{base}/overview.json"))
            lines = STATUS.findall(proc.log)
            workers = overview["workers"]
            if overview["jobs_last_day"].get("succeeded") != 2 or not lines or len(workers) != 1:
                return False
            counters = workers[0]["counters"]
            pages, _items, jobs = (int(n) for n in lines[-1])
            return (overview["frontier"] == {"queued": 0, "in_flight": 0} and jobs == 2
                    and counters.get("pages/listing", 0) + counters.get("pages/detail", 0) == pages)

        await wait_until(settled, alive=[proc])
        metrics = _get(f"http://127.0.0.1:{metrics_port}/metrics")
        page = _get(f"{base}/overview/live")
    finally:
        await proc.stop()
    proc.assert_clean()
    stats = dumped(proc.log, "crawlherd run stopped; statistics")
    pages, items_total, jobs = (int(n) for n in STATUS.findall(proc.log)[-1])

    # the statistics and the status line
    assert stats["jobs/succeeded"] == jobs == 2
    assert stats["pages/listing"] + stats["pages/detail"] == pages
    assert stats["items/new"] + stats["items/updated"] == items_total
    assert stats["items/new"] == items  # a fresh database: every item the site lists is new ...
    assert stats["items/updated"] == 0  # ... and none updated (a detail page completes its own item)

    # the metrics
    assert _metric(metrics, "crawlherd_jobs_total", '{outcome="succeeded"}') == jobs
    assert _metric(metrics, "crawlherd_job_pages_total") == stats["pages/listing"]
    assert _metric(metrics, "crawlherd_detail_pages_total") == stats["pages/detail"]
    assert _metric(metrics, "crawlherd_items_total", '{change="new"}') == stats["items/new"]
    assert _metric(metrics, "crawlherd_items_total", '{change="updated"}') == stats["items/updated"]

    # the console: its 24-hour totals, the worker's row (JSON and page), each job's row
    assert overview["items_last_day"] == {"new": stats["items/new"], "updated": stats["items/updated"]}
    counters = overview["workers"][0]["counters"]
    for name in ("jobs/succeeded", "pages/listing", "pages/detail", "items/new", "items/updated"):
        assert counters[name] == stats[name], name
    assert f'<td class="jobs-done">{jobs}</td>' in page and f'<td class="pages">{pages}</td>' in page
    code, out, err = await invoke("jobs", "list", "--json", env=env)
    assert code == 0, err
    runs = json.loads(out)
    assert sum(r["pages"] for r in runs) == stats["pages/listing"]
    assert sum(r["items_new"] for r in runs) == stats["items/new"]
    assert sum(r["items_updated"] for r in runs) == stats["items/updated"]
