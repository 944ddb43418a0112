"""The service commands end to end on a real SQLite file: db, targets, dispatch --once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from crawlherd.brokers import BROKER_ALIASES
from crawlherd.cli import main
from crawlherd.db import head_revision

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.db"
    monkeypatch.setenv("CRAWLHERD_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.delenv("CRAWLHERD_BROKER_URL", raising=False)
    monkeypatch.chdir(tmp_path)  # no stray crawlherd.toml
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_db_upgrade_and_current(db: Path) -> None:
    result = run("db", "upgrade")
    head = head_revision()
    assert result.exit_code == 0 and f"is at migration {head} (newest)" in result.output
    assert run("db", "upgrade").exit_code == 0  # idempotent
    assert f"current: {head}; newest: {head}" in run("db", "current").output


def test_a_read_command_does_not_create_a_db_a_write_command_does(db: Path) -> None:
    result = run("targets", "list")
    assert result.exit_code == 2 and "error: no config DB at" in result.output
    assert not db.exists()
    result = run("targets", "enable", "1")  # writes: the fresh DB is created (and has no target 1)
    assert "creating its tables" in result.output
    assert run("db", "current").exit_code == 0


def test_commands_refuse_an_unmigrated_db_that_holds_other_tables(db: Path) -> None:
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE somebody_elses (x)")
    result = run("targets", "list")
    assert result.exit_code == 2 and "run `crawlherd db upgrade` first" in result.output


def test_bad_database_url_is_a_clear_error(db: Path) -> None:
    result = run("db", "upgrade", "--database-url", "mysql://root:hunter2@db/x")
    assert result.exit_code == 2
    assert "unsupported database URL" in result.output and "hunter2" not in result.output


def test_unreachable_postgres_is_a_clear_error_with_the_password_hidden(db: Path) -> None:
    result = run("db", "upgrade", "--database-url", "postgresql://u:s3cret@127.0.0.1:1/x")
    assert result.exit_code == 2 and "failed migrating" in result.output
    assert "s3cret" not in result.output and "Traceback" not in result.output


def test_targets_workflow(db: Path) -> None:
    run("db", "upgrade")
    imported = run("targets", "import", str(EXAMPLES / "targets.toml"))
    assert imported.exit_code == 0 and "websites 2 new" in imported.output and "targets 7 new" in imported.output
    listing = run("targets", "list")
    assert listing.exit_code == 0 and listing.output.count("active") == 7 and "cron 30 7 * * 1-5" in listing.output
    show = run("targets", "show", "1")
    assert "'python' x 'berlin' on demo-jobs" in show.output and "backfill(2)" in show.output
    preview = run("targets", "preview", "7", "--next", "3")
    assert preview.exit_code == 0 and preview.output.count(" slot ") == 3 and "07:30:00+0" in preview.output
    assert "disabled" in run("targets", "disable", "7").output
    assert "disabled" in run("targets", "list").output
    assert "enabled; next run" in run("targets", "enable", "7").output
    missing = run("targets", "show", "99")
    assert missing.exit_code == 2 and "no scrape target with id 99" in missing.output


def test_bad_targets_file_lists_problems_and_imports_nothing(db: Path, tmp_path: Path) -> None:
    run("db", "upgrade")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "websites:\n  - name: x\n    base_url: nope\n    search_url_template: 'https://x/{q}'\n"
        "targets:\n  - website: x\n    keywords: [a]\n"
    )
    result = run("targets", "import", str(bad))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "3 problem(s), nothing imported" in result.output
    assert "line 3, websites[0].base_url" in result.output
    assert "line 4, websites[0].search_url_template" in result.output
    assert "line 6, targets[0]: give exactly one of 'every'" in result.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM websites").fetchone() == (0,)
    checked = run("targets", "import", "--check", str(EXAMPLES / "targets.yaml"))
    assert checked.exit_code == 0 and "OK (1 website(s), 2 target(s))" in checked.output


def test_dispatch_once_publishes_due_targets(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BROKER_ALIASES, "testdb", "tests.support.table_broker:TableBrokerDouble")
    run("db", "upgrade")
    run("targets", "import", str(EXAMPLES / "targets.toml"))
    with sqlite3.connect(db) as conn:  # make the six interval targets due now
        conn.execute(
            "UPDATE scrape_targets SET next_run_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 seconds') "
            "WHERE schedule_kind = 'interval'"
        )
    result = run("dispatch", "--once", "--broker-url", f"testdb+sqlite:///{db}")
    assert result.exit_code == 0, result.output
    assert "6 job(s) from 6 due target(s); published 6, failed 0" in result.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT key) FROM test_publishes").fetchone() == (6, 6)
        assert conn.execute("SELECT count(*) FROM dispatch_outbox WHERE status = 'published'").fetchone() == (6,)
    again = run("dispatch", "--once", "--broker-url", f"testdb+sqlite:///{db}")
    assert "0 job(s) from 0 due target(s); published 0, failed 0" in again.output  # nothing due or pending


def test_dispatch_with_an_unknown_broker_scheme(db: Path) -> None:
    run("db", "upgrade")
    result = run("dispatch", "--once", "--broker-url", "kafka://x")
    assert result.exit_code == 2 and "unknown broker URL scheme 'kafka'" in result.output
