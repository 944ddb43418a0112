"""``targets import --prune [--dry-run]``, ``targets delete ID...`` and read-only commands that do not
create a database for a mistyped path (issue 14), as a user sees them."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from crawlherd.cli import main

SITE = """\
[[websites]]
name = "shop"
base_url = "https://shop.example"
search_url_template = "https://shop.example/s?q={keywords}"
"""
BOTH = SITE + '\n[[targets]]\nwebsite = "shop"\nkeywords = ["a", "b"]\nevery = "1h"\n'
ONLY_A = SITE + '\n[[targets]]\nwebsite = "shop"\nkeywords = ["a"]\nevery = "1h"\n'


def cli(db: Path, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--database-url", f"sqlite:///{db}"])


def test_prune_dry_run_lists_then_prune_deletes(tmp_path: Path) -> None:
    db, f = tmp_path / "c.db", tmp_path / "t.toml"
    f.write_text(BOTH)
    assert cli(db, "targets", "import", str(f)).exit_code == 0
    f.write_text(ONLY_A)
    keep = cli(db, "targets", "import", str(f))
    assert keep.output.endswith("targets 0 new, 0 updated, 1 unchanged\n")  # without --prune, b stays
    dry = cli(db, "targets", "import", str(f), "--prune", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.output.splitlines() == [
        "would delete target 2: 'b' x '(no location)' on shop",
        f"dry run, nothing changed: {f}: websites 0 new, 1 updated; targets 0 new, 0 updated, 1 unchanged, "
        "1 would delete",
    ]
    assert "     2  active" in cli(db, "targets", "list").output
    done = cli(db, "targets", "import", str(f), "--prune")
    assert done.output.splitlines()[0] == "deleted target 2: 'b' x '(no location)' on shop"
    assert "     2  active" not in cli(db, "targets", "list").output


def test_delete_is_all_or_none(tmp_path: Path) -> None:
    db, f = tmp_path / "c.db", tmp_path / "t.toml"
    f.write_text(BOTH)
    cli(db, "targets", "import", str(f))
    bad = cli(db, "targets", "delete", "1", "99")
    assert bad.exit_code == 2
    assert bad.output == "error: no target 99: nothing deleted (see `crawlherd targets list`)\n"
    ok = cli(db, "targets", "delete", "1", "2")
    assert ok.output.splitlines() == [
        "deleted target 1: 'a' x '(no location)' on shop",
        "deleted target 2: 'b' x '(no location)' on shop",
    ]
    assert "no targets" in cli(db, "targets", "list").output


def test_read_commands_do_not_create_a_database_for_a_typo(tmp_path: Path) -> None:
    typo = tmp_path / "crawlerd.db"
    for args in (("targets", "list"), ("jobs", "dead"), ("db", "current"), ("items", "export")):
        result = cli(typo, *args)
        assert result.exit_code == 2, (args, result.output)
        assert not typo.exists(), args
