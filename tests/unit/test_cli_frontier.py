"""``crawlherd frontier stats|purge``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner

from crawlherd.cli import main
from crawlherd.frontier import open_scheduler
from crawlherd.request import Request


def fill(url: str, n: int) -> None:
    async def run() -> None:
        async with open_scheduler(url) as f:
            await f.enqueue_requests(Request(f"http://s{i % 3}.test/{i}") for i in range(n))
            lease = await f.next_request()
            assert lease is not None
            await f.ack(lease)

    asyncio.run(run())


def test_stats_and_purge(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    fill(url, 10)
    runner = CliRunner()
    result = runner.invoke(main, ["frontier", "stats", "--url", url])
    assert result.exit_code == 0, result.output
    assert "queued" in result.output and " 9\n" in result.output
    as_json = runner.invoke(main, ["frontier", "stats", "--url", url, "--json"])
    snapshot = json.loads(as_json.output)
    assert (snapshot["queued"], snapshot["acked"], snapshot["enqueued"]) == (9, 1, 10)
    assert sum(snapshot["hosts"].values()) == 9

    refused = runner.invoke(main, ["frontier", "purge", "--url", url], input="n\n")
    assert refused.exit_code != 0
    assert json.loads(runner.invoke(main, ["frontier", "stats", "--url", url, "--json"]).output)["queued"] == 9

    purged = runner.invoke(main, ["frontier", "purge", "--url", url, "--yes"])
    assert purged.exit_code == 0, purged.output
    assert "9 deleted" in purged.output
    assert json.loads(runner.invoke(main, ["frontier", "stats", "--url", url, "--json"]).output)["queued"] == 0


def test_bad_url_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["frontier", "stats", "--url", "sqlite:///:memory:"])
    assert result.exit_code == 2
    assert "needs a file" in result.output
    assert "Traceback" not in result.output
    memory = CliRunner().invoke(main, ["frontier", "stats", "--url", f"sqlite:///{tmp_path / 'x.db'}", "--memory"])
    assert memory.exit_code == 2 and "redis" in memory.output
