"""The command line tells the truth (issue 14): for each bullet of the issue that the other tests do not
already pin, the exact words a user sees, from the real command.

Where each bullet is tested (the index the issue asks for):

- robots.txt DNS failure, refused connection, timeout: tests/integration/test_cli_robots_truth.py
- config DB errors (missing database, login, unreachable, unknown host) with the URL as written and the
  password hidden; a mistyped SQLite path not created by a read command: here
- a misspelt CRAWLHERD_* variable names the closest one: tests/unit/test_settings_sources.py
  (test_the_cli_warns_about_a_misspelt_variable); defaults < crawlherd.toml < env < flags for every
  worker/dispatcher option: test_every_worker_and_dispatcher_option_is_settable_four_ways there
- cron that can never fire, R refused, @daily accepted, day-of-month + day-of-week either matching: here
  (and tests/unit/dispatch/test_schedule.py for the schedule itself)
- targets files in one pass, TOML lines, '61 7 * * *', requires_playwright = "no":
  tests/unit/dispatch/test_targets_file_truth.py; --prune --dry-run and delete:
  tests/unit/dispatch/test_cli_prune_delete.py
- live progress only on a terminal: here (a pseudo-terminal); plain status lines in pages/min and
  items/min, --log-format json, the statistics dump, Ctrl+C "stopping…": tests/integration/test_cli_output.py;
  -q and --json everywhere: tests/unit/test_cli_quiet_json.py
- examples/ against the demo site: tests/integration/test_examples.py; every snippet:
  tests/integration/test_doc_snippets.py
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner, Result

from crawlherd.cli import main
from crawlherd.settings import frontier_beside
from tests._netutil import free_port
from tests.servers.misbehaving import MisbehavingServer
from tests.support.forkserver import exec_crawlherd

pytestmark = pytest.mark.timeout(120)


def cli(*args: str, tmp_path: Path) -> Result:
    os.chdir(tmp_path)  # no crawlherd.toml of the caller's
    return CliRunner().invoke(main, list(args), env={"CRAWLHERD_DATABASE_URL": None})


@pytest.fixture(autouse=True)
def _keep_cwd() -> object:
    cwd = os.getcwd()
    yield None
    os.chdir(cwd)


# -- config DB errors ----------------------------------------------------------------------------------


def test_nothing_listening_names_the_url_as_written_without_its_password(tmp_path: Path) -> None:
    port = free_port()
    result = cli("targets", "list", "--database-url", f"postgresql://u:s3cret@127.0.0.1:{port}/x", tmp_path=tmp_path)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: config DB postgresql://u:***@127.0.0.1:{port}/x failed reading its migration: nothing answers at "
        f"that address ([Errno 111] Connect call failed ('127.0.0.1', {port})); is the server running, and is the "
        "port right?\n"
    )


def test_an_unknown_host_says_so(tmp_path: Path) -> None:
    result = cli("jobs", "list", "--database-url", "postgresql://u@no-such-host.invalid:5432/db", tmp_path=tmp_path)
    assert result.exit_code == 2
    assert re.fullmatch(
        r"error: config DB postgresql://u@no-such-host\.invalid:5432/db failed reading its migration: unknown host "
        r"\(\[Errno -?\d+\] [^)]+\); check the host name in the URL\n", result.stderr), result.stderr


@pytest.mark.postgres
def test_a_missing_database_says_how_to_create_it(postgres_url: str, tmp_path: Path) -> None:
    url = postgres_url.rsplit("/", 1)[0] + "/crawlherd_no_such_db"
    result = cli("targets", "list", "--database-url", url, tmp_path=tmp_path)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: config DB {url} failed reading its migration: the database does not exist (database "
        '"crawlherd_no_such_db" does not exist); create it (createdb NAME) or fix the URL\n'
    )


@pytest.mark.postgres
def test_a_refused_login_says_so_and_hides_the_password(postgres_url: str, tmp_path: Path) -> None:
    url = postgres_url.replace("postgresql://", "postgresql://crawlherd_nobody:s3cret@", 1).replace("postgres@", "")
    result = cli("targets", "list", "--database-url", url, tmp_path=tmp_path)
    assert result.exit_code == 2
    shown = url.replace(":s3cret@", ":***@")
    assert result.stderr == (
        f"error: config DB {shown} failed reading its migration: the server refused the login (role "
        '"crawlherd_nobody" does not exist); check the user and password in the URL\n'
    )


@pytest.mark.parametrize("command", [["targets", "list"], ["jobs", "list"], ["jobs", "dead"], ["explain", "1"],
                                     ["items", "export"], ["users", "list"], ["db", "current"]])
def test_a_read_command_does_not_create_a_mistyped_sqlite_path(command: list[str], tmp_path: Path) -> None:
    result = cli(*command, "--database-url", "sqlite:///crawlherd-typo.db", tmp_path=tmp_path)
    assert result.exit_code == 2 and not (tmp_path / "crawlherd-typo.db").exists()
    assert result.stderr == (
        "error: no config DB at crawlherd-typo.db (sqlite:///crawlherd-typo.db): check the path (--database-url or "
        "CRAWLHERD_DATABASE_URL), or create it with `crawlherd db upgrade` or `crawlherd targets import FILE`\n"
    )


# -- schedules say what they mean ----------------------------------------------------------------------

TARGETS = """\
websites:
  - name: s
    base_url: https://s.example
    search_url_template: "https://s.example/?q={keywords}"
targets:
  - website: s
    keywords: [a]
    cron: "CRON"
    timezone: Europe/Berlin
"""


def import_cron(cron: str, tmp_path: Path) -> Result:
    path = tmp_path / "t.yaml"
    path.write_text(TARGETS.replace("CRON", cron))
    return cli("targets", "import", str(path), "--database-url", f"sqlite:///{tmp_path}/c.db", tmp_path=tmp_path)


@pytest.mark.parametrize("cron", ["0 0 31 2 *", "* * 31 4 *"])
def test_a_cron_that_can_never_fire_is_refused_at_import(cron: str, tmp_path: Path) -> None:
    result = import_cron(cron, tmp_path)
    assert result.exit_code == 2
    assert result.stderr.endswith(
        f"error: {tmp_path / 't.yaml'}: 1 problem(s), nothing imported:\n"
        f"  line 8, targets[0].cron: cron '{cron}' can never fire: no date matches its day-of-month and month "
        "(e.g. 31 February, 31 April)\n"
    )


def test_random_r_is_refused_at_import(tmp_path: Path) -> None:
    result = import_cron("R 7 * * *", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.endswith(
        "  line 8, targets[0].cron: cron 'R 7 * * *': the minute 'R' uses R (random), which gives another slot on "
        "every evaluation; slots and job keys must be stable -- pick a fixed value\n"
    )


def preview(tmp_path: Path) -> list[str]:
    result = cli("targets", "preview", "1", "--next", "12", "--json", "--database-url", f"sqlite:///{tmp_path}/c.db",
                 tmp_path=tmp_path)
    assert result.exit_code == 0, result.output
    return [run["slot"] for run in json.loads(result.stdout)["runs"]]


def test_daily_alias_is_accepted(tmp_path: Path) -> None:
    assert import_cron("@daily", tmp_path).exit_code == 0
    berlin = ZoneInfo("Europe/Berlin")
    assert {datetime.fromisoformat(s).astimezone(berlin).strftime("%H:%M") for s in preview(tmp_path)} == {"00:00"}


def test_day_of_month_and_day_of_week_either_matches_as_documented(tmp_path: Path) -> None:
    assert import_cron("0 9 1 * 1", tmp_path).exit_code == 0  # the example of docs/service.md
    days = [datetime.fromisoformat(s).astimezone(ZoneInfo("Europe/Berlin")) for s in preview(tmp_path)]
    assert all(d.day == 1 or d.weekday() == 0 for d in days)
    assert any(d.day == 1 and d.weekday() != 0 for d in days) and any(d.day != 1 for d in days)
    assert "`0 9 1 * 1` runs at 09:00 on the 1st of every month\n  *and* on every Monday" in (
        Path(__file__).parents[2] / "docs" / "service.md").read_text()


# -- help that tells the truth ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "worker"])
def test_help_names_the_frontier_that_is_used(command: str, tmp_path: Path) -> None:
    text = " ".join(cli(command, "--help", tmp_path=tmp_path).stdout.split())
    assert frontier_beside("sqlite:///crawlherd.db") == "sqlite:///crawlherd-frontier.db"
    assert ("else NAME-frontier.db beside a SQLite config DB NAME.db, else memory://" in text)
    if command == "run":
        assert "the frontier of pages is the file beside it (crawlherd-frontier.db)" in text


# -- live progress only on a terminal ------------------------------------------------------------------


async def test_on_a_terminal_progress_is_live_not_plain_lines() -> None:
    async with MisbehavingServer(pages=40) as server:
        primary, secondary = pty.openpty()
        try:
            proc = await exec_crawlherd(
                "crawl", server.url + "/page/1", "--allow-private",
                "--delay", "0.1", "--max-pages", "5", "--depth", "9",
                stdout=asyncio.subprocess.DEVNULL, stderr=secondary,
                env={**os.environ, "CRAWLHERD_STATUS_INTERVAL": "0.1"},
            )
            os.close(secondary)
            chunks = []
            while True:
                try:
                    chunk = await asyncio.to_thread(os.read, primary, 65536)
                except OSError:  # the terminal closed: the process ended
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            os.close(primary)
    screen = b"".join(chunks).decode()
    assert proc.returncode == 0, screen
    assert "\x1b[" in screen  # redrawn in place
    assert not re.search(r"^\d\d:\d\d:\d\d pages \d+ \(", screen, re.M)  # no plain status lines
    assert "crawled 5 page(s): 5 ok, 0 failed" in screen
