"""Output fits where it goes (issue 14): plain status lines when not on a terminal, --json, -q,
--log-format json, a statistics dump at the end, and "stopping…" at once on Ctrl+C -- as a user sees
them, from real processes."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.servers.misbehaving import MisbehavingServer
from tests.support.cli import crawlherd, start_crawlherd

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def server() -> AsyncIterator[MisbehavingServer]:
    async with MisbehavingServer(pages=40) as s:
        yield s


async def test_crawl_off_a_terminal_prints_plain_status_lines_and_a_statistics_dump(
    server: MisbehavingServer,
) -> None:
    code, _, err = await crawlherd(
        "crawl", server.url + "/page/1", "--allow-private", "--delay", "0.15", "--max-pages", "6", "--depth", "9",
        env={"CRAWLHERD_STATUS_INTERVAL": "0.1"},
    )
    assert code == 0, err
    assert "\r" not in err and "\x1b" not in err  # no live view: stderr is a pipe
    status = [line for line in err.splitlines() if re.fullmatch(
        r"\d\d:\d\d:\d\d pages \d+ \(\d+\.\d/min\), ok \d+, failed \d+", line)]
    assert status, err
    dump = err.split("statistics:\n", 1)[1]
    dump = dump[: dump.index("}") + 1]
    stats = ast.literal_eval(dump)
    assert stats["pages/total"] == 6 and stats["pages/ok"] == 6 and stats["status/200"] == 6
    assert stats["pages/per_minute"] > 0


async def test_crawl_json_and_quiet(server: MisbehavingServer) -> None:
    code, out, err = await crawlherd("crawl", server.url + "/page/1", "--allow-private", "--delay", "0",
                                     "--max-pages", "3", "--depth", "9", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["pages/total"] == 3 and result["pages/ok"] == 3 and result["examples"] == {}
    assert "crawled 3 page(s)" not in err
    code, out, err = await crawlherd("crawl", server.url + "/page/1", "--allow-private", "--delay", "0",
                                     "--max-pages", "3", "-q")
    assert (code, out, err) == (0, "", "")


async def test_log_format_json(server: MisbehavingServer) -> None:
    code, _, err = await crawlherd("--log-format", "json", "-vv", "crawl", server.url + "/page/1",
                                   "--allow-private", "--max-pages", "1", "-q")
    assert code == 0, err
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert records, err
    assert set(records[0]) >= {"time", "level", "logger", "message"}
    assert all(line.startswith("{") for line in err.splitlines() if line.strip())


async def test_db_current_and_dispatch_once_speak_json(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/c.db"
    assert (await crawlherd("db", "upgrade", "--database-url", db))[0] == 0
    code, out, _ = await crawlherd("db", "current", "--json", "--database-url", db)
    current = json.loads(out)
    assert code == 0 and current["up_to_date"] is True and current["current"] == current["newest"]
    code, out, err = await crawlherd("dispatch", "--once", "--json", "--database-url", db)
    assert code == 0, err
    assert json.loads(out) == {"due_targets": 0, "jobs": 0, "published": 0, "failed": 0}


async def test_ctrl_c_says_stopping_at_once_and_what_it_waits_for(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/c.db"
    assert (await crawlherd("db", "upgrade", "--database-url", db))[0] == 0
    proc = await start_crawlherd("worker", "--database-url", db)
    assert proc.stderr is not None and proc.stdout is not None
    banner = await asyncio.wait_for(proc.stderr.readline(), 60)
    assert banner.startswith(b"worker "), banner
    proc.send_signal(signal.SIGINT)
    stopping = await asyncio.wait_for(proc.stderr.readline(), 30)
    if stopping == b"\n":  # a newline first, to leave a live status line
        stopping = await asyncio.wait_for(proc.stderr.readline(), 30)
    assert stopping.decode() == (
        "stopping… waiting for 0 job(s) in flight to finish (up to 30 s; the rest are requeued) "
        "(Ctrl+C again to abort)\n"
    )
    _, rest = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    text = rest.decode()
    assert text.startswith("worker stopped (")
    stats = ast.literal_eval(text.split("statistics:\n", 1)[1])
    assert stats["jobs/received"] == 0 and "pages/per_minute" in stats and "items/per_minute" in stats
