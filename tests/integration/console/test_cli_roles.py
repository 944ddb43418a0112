"""Roles on the command line: ``crawlherd --as USER`` (or ``CRAWLHERD_USER``) acts as that console user,
checked against the one table of :class:`~crawlherd.console.users.Action` that the console's routes use.
A viewer is refused every command that changes something, and nothing changes; an operator may run,
pause, retry and discard but not edit or manage users; without ``--as`` the shell is an admin."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import func, select

from crawlherd.cli import main
from crawlherd.console.audit import list_audit
from crawlherd.console.users import Action, Role, add_user
from crawlherd.db import create_engine, upgrade
from crawlherd.db.models import AuditEntry, DispatchOutbox, JobRun, ScrapeTarget
from crawlherd.messages import decode_job
from crawlherd.worker.runs import RunStore
from tests.support.console import add_site, add_target

TARGETS_FILE = """
[[websites]]
name = "site"
base_url = "https://jobs.example.com"
search_url_template = "https://jobs.example.com/s?q={keywords}"

[[targets]]
website = "site"
keywords = ["golang"]
every = "1h"
"""


async def _setup(url: str) -> tuple[int, int]:
    """A target, a dead job of it (through the outbox, as the console's run-now makes it), and one
    user of each role; (target id, dead run id)."""
    await upgrade(url)
    engine = create_engine(url)
    try:
        await add_site(engine, "site", "https://jobs.example.com")
        tid = await add_target(engine, "site", "python", "berlin")
        from crawlherd.console.run_now import run_now

        await run_now(engine, tid, requested_by="test")
        async with engine.connect() as conn:
            job = decode_job((await conn.execute(select(DispatchOutbox.body))).scalar_one().encode())
        store = RunStore(engine)
        await store.start(job, worker="w1")
        await store.finish(job, status="dead", error="HTTP 500")
        for name, role in (("root", Role.ADMIN), ("op", Role.OPERATOR), ("view", Role.VIEWER)):
            await add_user(engine, name, "a long enough password", role=role, actor="test")
        async with engine.connect() as conn:
            run_id = (await conn.execute(select(JobRun.id))).scalar_one()
        return tid, run_id
    finally:
        await engine.dispose()


async def _state(url: str) -> dict[str, Any]:
    """What a refused command must leave as it was: the audit trail, the targets and the runs."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return {
                "audit": (await conn.execute(select(func.count()).select_from(AuditEntry))).scalar_one(),
                "targets": (await conn.execute(
                    select(ScrapeTarget.id, ScrapeTarget.active).order_by(ScrapeTarget.id))).all(),
                "runs": (await conn.execute(select(JobRun.id, JobRun.status))).all(),
                "outbox": (await conn.execute(select(DispatchOutbox.status))).all(),
            }
    finally:
        await engine.dispose()


def _invoke(url: str, args: list[str], *, user: str | None, env: dict[str, str] | None = None) -> Result:
    prefix = ["--as", user] if user else []
    return CliRunner().invoke(main, [*prefix, *args, "--database-url", url], input="a long enough password\n",
                              env=env)


def _commands(tmp_path: Path, tid: int, run_id: int) -> list[tuple[list[str], Action]]:
    """Every state-changing command that acts through the console's model, with the action it is."""
    targets = tmp_path / "targets.toml"
    targets.write_text(TARGETS_FILE)
    return [
        (["targets", "import", str(targets)], Action.IMPORT),
        (["targets", "delete", str(tid)], Action.EDIT),
        (["targets", "disable", str(tid)], Action.PAUSE),
        (["targets", "enable", str(tid)], Action.PAUSE),
        (["targets", "run", str(tid)], Action.RUN_NOW),
        (["jobs", "retry", str(run_id)], Action.RETRY),
        (["jobs", "discard", str(run_id), "--reason", "test"], Action.DISCARD),
        (["users", "add", "newbie", "--password-stdin"], Action.USERS),
        (["users", "role", "op", "admin"], Action.USERS),
        (["users", "logout", "root"], Action.USERS),
        (["users", "remove", "op"], Action.USERS),
    ]


def test_a_viewer_is_refused_every_state_changing_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    tid, run_id = asyncio.run(_setup(url))
    before = asyncio.run(_state(url))
    for args, action in _commands(tmp_path, tid, run_id):
        result = _invoke(url, args, user="view")
        assert result.exit_code == 2, (args, result.output)
        assert f"needs the {action.role.label} role" in result.output and "you are viewer" in result.output, args
    # the environment variable names the user too
    by_env = _invoke(url, ["targets", "disable", str(tid)], user=None, env={"CRAWLHERD_USER": "view"})
    assert by_env.exit_code == 2 and "needs the operator role" in by_env.output
    assert asyncio.run(_state(url)) == before
    # ... and may read
    for args in (["targets", "list"], ["jobs", "list"], ["jobs", "dead"], ["explain", str(tid)]):
        assert _invoke(url, args, user="view").exit_code == 0, args


def test_an_operator_operates_but_does_not_administer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    tid, run_id = asyncio.run(_setup(url))
    for args, action in _commands(tmp_path, tid, run_id):
        if action.role > Role.OPERATOR:
            result = _invoke(url, args, user="op")
            assert result.exit_code == 2 and "needs the admin role" in result.output, (args, result.output)
    assert _invoke(url, ["targets", "disable", str(tid)], user="op").exit_code == 0
    assert json.loads(_invoke(url, ["jobs", "dead", "--json"], user="op").output)[0]["id"] == run_id
    assert _invoke(url, ["jobs", "discard", str(run_id), "--reason", "seen to"], user="op").exit_code == 0
    assert json.loads(_invoke(url, ["jobs", "dead", "--json"], user="op").output) == []  # as on the console

    async def actors() -> list[tuple[str, str]]:
        engine = create_engine(url)
        try:
            return [(a.actor, a.action) for a in await list_audit(engine) if a.actor != "test"]
        finally:
            await engine.dispose()

    assert ("op", "deadletter.discard") in asyncio.run(actors())  # audited under the user's name


@pytest.mark.parametrize("user", ["nobody", None])
def test_an_unknown_user_is_refused_and_the_shell_is_admin(tmp_path: Path, user: str | None) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    asyncio.run(_setup(url))
    result = _invoke(url, ["users", "list", "--json"], user=user)
    if user is None:  # no --as: the shell, an admin
        assert result.exit_code == 0 and {u["name"] for u in json.loads(result.output)} == {"root", "op", "view"}
    else:
        assert result.exit_code == 2 and "no console user of that name" in result.output
