"""The console's answers on the command line: targets run, jobs list / show, users, --json."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner, Result
from sqlalchemy import select

from crawlherd.cli import main
from crawlherd.console.users import authenticate
from crawlherd.db import create_engine, upgrade
from crawlherd.db.models import DispatchOutbox
from crawlherd.messages import decode_job
from crawlherd.worker.runs import RunStore
from tests.support.console import add_site, add_target


def run(url: str, *args: str, stdin: str | None = None) -> Result:
    result = CliRunner().invoke(main, [*args, "--database-url", url], input=stdin, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


async def _setup(url: str) -> int:
    await upgrade(url)
    engine = create_engine(url)
    try:
        await add_site(engine, "site", "https://jobs.example.com")
        return await add_target(engine, "site", "python", "berlin")
    finally:
        await engine.dispose()


async def _work_the_job(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            job = decode_job((await conn.execute(select(DispatchOutbox.body))).scalar_one().encode())
        store = RunStore(engine)
        await store.start(job, worker="w1")
        await store.finish(job, status="failed", error="HTTP 503")
        await store.start(job.model_copy(update={"attempt_count": 1}), worker="w2")
        await store.finish(job.model_copy(update={"attempt_count": 1}), status="dead", error="HTTP 500")
    finally:
        await engine.dispose()


def test_run_now_jobs_and_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    tid = asyncio.run(_setup(url))
    assert f"target {tid}: run queued" in run(url, "targets", "run", str(tid)).output
    assert f"target {tid}: run already queued" in run(url, "targets", "run", str(tid)).output
    asyncio.run(_work_the_job(url))

    listed = json.loads(run(url, "jobs", "list", "--json").output)
    assert [(j["target_id"], j["status"], j["attempts"]) for j in listed] == [(tid, "dead", 2)]
    assert json.loads(run(url, "jobs", "list", "--status", "succeeded", "--json").output) == []
    assert "dead" in run(url, "jobs", "list", "--target", str(tid)).output

    shown = json.loads(run(url, "jobs", "show", str(listed[0]["id"]), "--json").output)
    assert shown["manual"] is True
    assert [(a["attempt"], a["worker"], a["status"], a["error"]) for a in shown["history"]] == [
        (1, "w1", "failed", "HTTP 503"),
        (2, "w2", "dead", "HTTP 500"),
    ]
    text = run(url, "jobs", "show", str(listed[0]["id"])).output
    assert "(run now)" in text and "attempt 2 on w2: dead" in text

    targets = json.loads(run(url, "targets", "list", "--json").output)
    assert [(t["id"], t["keywords"], t["location"]) for t in targets] == [(tid, "python", "berlin")]
    dead = json.loads(run(url, "jobs", "dead", "--json").output)
    assert [d["error"] for d in dead] == ["HTTP 500"]


def test_users(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    asyncio.run(_setup(url))
    run(url, "users", "add", "ops", "--password-stdin", stdin="correct horse battery\n")
    users = json.loads(run(url, "users", "list", "--json").output)
    assert [u["name"] for u in users] == ["ops"] and users[0]["last_login_at"] is None

    async def check() -> tuple[bool, bool]:
        engine = create_engine(url)
        try:
            return await authenticate(engine, "ops", "correct horse battery"), await authenticate(engine, "ops", "x")
        finally:
            await engine.dispose()

    assert asyncio.run(check()) == (True, False)
    short = CliRunner().invoke(main, ["users", "add", "b", "--password-stdin", "--database-url", url], input="short\n")
    assert short.exit_code == 2 and "at least 8" in short.output
    run(url, "users", "remove", "ops")
    assert json.loads(run(url, "users", "list", "--json").output) == []
