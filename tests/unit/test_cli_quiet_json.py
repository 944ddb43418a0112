"""``-q`` and ``--json`` on every command that prints data (issue 14, "output fits where it goes").

The first test walks the whole ``crawlherd`` command tree (every subcommand of every group) and
asserts that each command has both options, but for the few in :data:`EXEMPT`, each with its reason.
The others run the data-printing commands on a real SQLite config DB holding ``examples/targets.toml``:
with ``-q`` standard output stays empty, with ``--json`` it is one JSON document holding the data.
(The long-running commands are run with both in tests/integration/test_cli_output.py -- ``run``,
``worker``, ``dispatch --once``, ``crawl`` -- and ``demo --json`` in tests/integration/test_pipeline.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from crawlherd.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: Commands that print no data, and why.
EXEMPT = {
    "web": "a server: its one line says where it listens; it has no result to quiet or to give as JSON",
}


def walk(group: click.Group, ctx: click.Context, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found += walk(command, click.Context(command, parent=ctx, info_name=name), path + " ")
        else:
            found.append((path, command))
    return found


COMMANDS = walk(main, click.Context(main, info_name="crawlherd"))


def test_the_walk_reaches_every_subcommand() -> None:
    names = {path for path, _ in COMMANDS}
    assert {"targets show", "targets preview", "jobs retry", "frontier stats", "users add", "db prune", "crawl",
            "run", "worker", "dispatch", "demo", "explain", "items export"} <= names
    assert set(EXEMPT) <= names


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_data_printing_command_has_quiet_and_json(path: str, command: click.Command) -> None:
    flags = {opt for param in command.params if isinstance(param, click.Option) for opt in param.opts}
    if path in EXEMPT:
        assert not {"-q", "--json"} & flags, f"{path} is exempt but has -q/--json: take it off EXEMPT"
        return
    assert {"-q", "--quiet", "--json"} <= flags, f"`crawlherd {path}` lacks -q/--quiet or --json"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.db"
    monkeypatch.setenv("CRAWLHERD_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.delenv("CRAWLHERD_BROKER_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    imported = invoke("targets", "import", str(EXAMPLES / "targets.toml"), "-q")
    assert (imported.exit_code, imported.stdout) == (0, ""), imported.output
    return path


def invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


def both(*args: str, stdin: str | None = None) -> Any:
    """Run ``args`` with -q (nothing on stdout) and with --json (returned, parsed)."""
    quiet = invoke(*args, "-q", stdin=stdin)
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stdout == "", f"{args} -q printed {quiet.stdout!r}"
    as_json = invoke(*args, "--json", stdin=stdin)
    assert as_json.exit_code == 0, as_json.output
    return json.loads(as_json.stdout)


def test_targets_commands(db: Path) -> None:
    assert both("targets", "import", str(EXAMPLES / "targets.toml"))["targets_unchanged"] == 7
    assert both("targets", "import", "--check", str(EXAMPLES / "targets.yaml")) == {
        "file": str(EXAMPLES / "targets.yaml"), "ok": True, "websites": 1, "targets": 2}
    listed = both("targets", "list")
    assert [t["id"] for t in listed] == [1, 2, 3, 4, 5, 6, 7]
    shown = both("targets", "show", "1")
    assert (shown["id"], shown["website"], shown["keywords"], shown["location"]) == (1, "demo-jobs", "python", "berlin")
    preview = both("targets", "preview", "7", "--next", "3")
    assert preview["target"] == 7 and len(preview["runs"]) == 3
    assert all(r["local"].endswith(("+01:00", "+02:00")) and "07:30:00" in r["local"] for r in preview["runs"])
    assert both("targets", "disable", "7")["active"] is False
    assert both("targets", "enable", "7")["active"] is True
    runs = both("targets", "run", "2")
    assert runs[0]["target_id"] == 2 and runs[0]["created"] is False  # the -q run queued it already
    assert invoke("targets", "delete", "6", "-q").stdout == ""
    assert [t["id"] for t in json.loads(invoke("targets", "delete", "5", "--json").stdout)] == [5]


def test_jobs_explain_db_users(db: Path) -> None:
    assert both("jobs", "dead") == []
    assert both("jobs", "list") == []
    assert both("jobs", "retry", "--all") == {"sent": [], "skipped": []}
    assert both("jobs", "retry", "12") == {"sent": [], "skipped": [12]}
    why = both("explain", "1")
    assert why["target_id"] == 1 and why["lineage"] == []
    assert both("db", "current")["up_to_date"] is True
    assert both("db", "upgrade")["up_to_date"] is True
    assert both("db", "prune", "--dry-run")["runs"] == 0
    added = both("users", "add", "ada", "--password-stdin", stdin="correct horse\n")
    assert added == {"name": "ada", "role": "admin", "saved": True}
    assert [(u["name"], u["role"]) for u in both("users", "list")] == [("ada", "admin")]
    assert both("users", "role", "ada", "admin") == {"name": "ada", "role": "admin"}
    assert both("users", "logout", "ada") == {"name": "ada", "ended": 0}
    assert invoke("users", "remove", "ada", "-q").stdout == ""


def test_frontier_commands(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/frontier.db"
    stats = both("frontier", "stats", "--url", url)
    assert stats["queued"] == 0 and stats["hosts"] == {}
    assert both("frontier", "purge", "--url", url, "--yes") == {"url": url, "deleted": 0, "session_sites": 0}
