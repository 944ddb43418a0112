"""Output fits where it goes (issue 14): plain status lines when not on a terminal, --json, -q,
--log-format json, a statistics dump at the end, and "stopping…" at once on Ctrl+C -- as a user sees
them, from real processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from crawlherd.demo import DemoSite
from tests.servers.misbehaving import MisbehavingServer
from tests.support.cli import WORKER_STATUS, crawlherd, dumped, invoke, running_crawlherd, worker_status_until_done

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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
    stats = dumped(err, "statistics")
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
    assert (await invoke("db", "upgrade", "--database-url", db))[0] == 0
    code, out, _ = await invoke("db", "current", "--json", "--database-url", db)
    current = json.loads(out)
    assert code == 0 and current["up_to_date"] is True and current["current"] == current["newest"]
    code, out, err = await crawlherd("dispatch", "--once", "--json", "--database-url", db)
    assert code == 0, err
    assert json.loads(out) == {"due_targets": 0, "jobs": 0, "published": 0, "failed": 0}


async def test_ctrl_c_says_stopping_at_once_and_what_it_waits_for(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/c.db"
    assert (await invoke("db", "upgrade", "--database-url", db))[0] == 0
    async with running_crawlherd("worker", "--database-url", db) as proc:
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
        stats = json.loads(text.split("statistics: ", 1)[1])
        assert stats["jobs/received"] == 0 and "pages/per_minute" in stats and "items/per_minute" in stats


# -- run and worker: status lines in pages/min and items/min, the statistics at the end -------------

RUN_STATUS = re.compile(
    r"\d\d:\d\d:\d\d pages \d+ \(\d+\.\d/min\), items \d+ \(\d+\.\d/min\); "
    r"jobs \d+ done, \d+ running, \d+ retried, \d+ dead"  # this run's jobs, as a worker's line says them
)


async def test_run_off_a_terminal_prints_pages_and_items_per_minute_and_a_statistics_dump(
    demo_pipeline: tuple[DemoSite, dict[str, str], int],
) -> None:
    _, env, items = demo_pipeline
    code, out, err = await crawlherd("run", "--until-idle", "--no-web", "--allow-private", env=env)
    assert code == 0, err
    assert out == "" and "\r" not in err and "\x1b" not in err
    lines = err.splitlines()
    db = env["CRAWLHERD_DATABASE_URL"]
    assert lines[0] == f"crawlherd run: {db}, broker {db}, frontier {db.removesuffix('.db')}-frontier.db", err
    # at least one: the politeness delay (0.2 s) between the pages of a host outlasts the 0.1 s interval
    assert [line for line in lines if RUN_STATUS.fullmatch(line)], err
    stats = dumped(err, "crawlherd run stopped; statistics")
    assert stats["jobs/succeeded"] == 2 and stats["items/new"] == items
    # this run's dispatching: the two jobs were queued by `targets run` (run now), and published by this run
    assert stats["jobs/dispatched"] == 0 and stats["jobs/published"] == 2
    assert stats["pages/per_minute"] > 0 and stats["items/per_minute"] > 0


async def test_worker_off_a_terminal_prints_status_lines_then_stops_on_ctrl_c_with_its_statistics(
    demo_pipeline: tuple[DemoSite, dict[str, str], int],
) -> None:
    _, env, items = demo_pipeline
    code, out, err = await crawlherd("dispatch", "--once", "--json", env=env)
    assert code == 0 and json.loads(out)["published"] == 2, err
    async with running_crawlherd("worker", "--allow-private", env=env) as proc:
        assert proc.stderr is not None
        banner = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        assert banner.startswith("worker "), banner
        assert await worker_status_until_done(proc.stderr, 2) == items
        proc.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(proc.communicate(), 60)
        text = rest.decode()
        stopping = next(line for line in text.splitlines() if not WORKER_STATUS.fullmatch(line) and line)
        assert stopping == (
            "stopping… waiting for 0 job(s) in flight to finish (up to 30 s; the rest are requeued) "
            "(Ctrl+C again to abort)"
        )
        assert proc.returncode == 0
        stats = dumped(text, f"worker stopped ({banner.split()[1].rstrip(':')}); statistics")
        assert stats["jobs/received"] == 2 and stats["jobs/succeeded"] == 2 and stats["items/new"] == items
        assert stats["pages/per_minute"] > 0 and stats["items/per_minute"] > 0


# -- Ctrl+C: "stopping…" at once, and what it waits for ------------------------------------------------


async def interrupt_after(proc: asyncio.subprocess.Process, stream: asyncio.StreamReader, first: str) -> str:
    """Wait for a line matching the regular expression ``first`` on ``stream`` (the lines before it must
    be status lines), send SIGINT, and return the next line of stderr that is not a status line."""
    while True:
        line = (await asyncio.wait_for(stream.readline(), 60)).decode()
        if re.match(first, line):
            break
        assert re.match(r"\d\d:\d\d:\d\d ", line), line
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    while True:
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        if line.strip() and not re.match(r"\d\d:\d\d:\d\d ", line):
            return line


@pytest.mark.parametrize(
    ("command", "banner", "waits_for", "last_words"),
    [
        (["run", "--no-web"], "crawlherd run: ",
         "0 job(s) in flight to finish (up to 30 s; the rest are requeued)", "crawlherd run stopped; statistics: {"),
        (["dispatch"], "dispatcher ",
         "the current dispatch cycle (its claimed outbox rows are published or released)", "dispatcher stopped\n"),
    ],
    ids=["run", "dispatch"],
)
async def test_ctrl_c_says_stopping_and_what_it_waits_for(
    command: list[str], banner: str, waits_for: str, last_words: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/c.db"
    assert (await invoke("db", "upgrade", "--database-url", db))[0] == 0
    async with running_crawlherd(*command, "--database-url", db) as proc:
        assert proc.stderr is not None and proc.stdout is not None
        # run's banner is information (stderr); dispatch's lines are its output (stdout)
        stopping = await interrupt_after(proc, proc.stderr if command[0] == "run" else proc.stdout, banner)
        assert stopping == f"stopping… waiting for {waits_for} (Ctrl+C again to abort)\n"
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0 and last_words in (out + err).decode()


async def test_ctrl_c_on_crawl_stops_at_once_and_still_prints_the_summary(server: MisbehavingServer) -> None:
    async with running_crawlherd(
        "crawl", server.url + "/page/1", "--allow-private", "--delay", "0.3", "--max-pages", "40", "--depth", "99",
        env={"CRAWLHERD_STATUS_INTERVAL": "0.1"},
    ) as proc:
        assert proc.stderr is not None
        stopping = await interrupt_after(proc, proc.stderr, r"\d\d:\d\d:\d\d pages [1-9]")
        assert re.fullmatch(
            r"stopping… waiting for \d+ page\(s\) in flight to be cancelled; then the summary and statistics of the "
            r"pages crawled \(Ctrl\+C again to abort\)\n", stopping), stopping
        _, rest = await asyncio.wait_for(proc.communicate(), 60)
        stats = dumped(rest.decode(), "statistics")
        assert 0 < stats["pages/total"] < 40 and stats["pages/ok"] == stats["pages/total"]


# -- -q and --json on the long-running commands -------------------------------------------------------


@pytest.mark.slow
async def test_run_and_dispatch_once_are_silent_with_q_and_speak_json_with_json(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/c.db"
    assert await crawlherd("run", "--until-idle", "--no-web", "-q", "--database-url", db) == (0, "", "")
    code, out, err = await crawlherd("run", "--until-idle", "--no-web", "--json", "--database-url", db)
    assert (code, err) == (0, "")
    stats = json.loads(out)
    assert stats["jobs/dispatched"] == 0 and stats["items/per_minute"] == 0
    assert await crawlherd("dispatch", "--once", "-q", "--database-url", db) == (0, "", "")


async def wait_for_heartbeat(db_file: Path, pid: int) -> None:
    """Until the process ``pid`` has registered in the config DB (its signal handlers are installed by then)."""
    while True:
        with contextlib.closing(sqlite3.connect(db_file)) as conn:
            if conn.execute("SELECT count(*) FROM process_heartbeats WHERE pid = ?", (pid,)).fetchone()[0]:
                return
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("flag", ["-q", "--json"])
async def test_worker_with_q_or_json_prints_only_its_stop_line_and_its_result(flag: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/c.db"
    assert (await invoke("db", "upgrade", "--database-url", db))[0] == 0
    async with running_crawlherd("worker", flag, "--database-url", db) as proc:
        await asyncio.wait_for(wait_for_heartbeat(tmp_path / "c.db", proc.pid), 60)
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    # the answer to Ctrl+C is printed even with -q: a person pressed it and waits
    assert err.decode().strip() == (
        "stopping… waiting for 0 job(s) in flight to finish (up to 30 s; the rest are requeued) (Ctrl+C again to abort)"
    )
    if flag == "-q":
        assert out == b""
    else:
        stats = json.loads(out)
        assert stats["jobs/received"] == 0 and "pages/per_minute" in stats and "items/per_minute" in stats
