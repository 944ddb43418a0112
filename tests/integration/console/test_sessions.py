"""Console sessions, roles and the operator's view over HTTP (the app behind httpx), on SQLite and on
PostgreSQL: timeouts on an injected clock, a new identifier at every login, the migration of existing
users, the last admin, the users CLI, the roles of an operator, unknown filters, a fresh outbox slot."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from crawlherd.cli import main
from crawlherd.clock import FakeClock
from crawlherd.console.explain import OUTBOX_PATIENCE, explain
from crawlherd.console.run_now import run_now
from crawlherd.console.sessions import SessionPolicy
from crawlherd.console.users import Role, add_user, list_users, remove_user, set_role
from crawlherd.db import create_engine, upgrade
from crawlherd.db.engine import db_now
from crawlherd.db.heartbeat import Heartbeat
from crawlherd.db.models import ConsoleSession, DispatchOutbox, User, Website
from crawlherd.errors import CrawlherdError
from crawlherd.web.app import _check_guarded, create_app
from tests.integration.console.conftest import Browser
from tests.support.console import a_retried_dead_job, add_site, add_target

PASSWORD = "correct horse battery"


@pytest.fixture
def db_url(config_db_url: str) -> str:  # SQLite and PostgreSQL
    return config_db_url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())


@pytest.fixture
async def client(engine: AsyncEngine, clock: FakeClock) -> AsyncIterator[Browser]:
    policy = SessionPolicy(clock=clock, idle=600, absolute=3600)
    app = create_app(engine, session_policy=policy)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        yield Browser(c)


async def sessions_of(engine: AsyncEngine, name: str) -> int:
    async with engine.connect() as conn:
        return int(
            (await conn.execute(
                select(func.count()).select_from(ConsoleSession).join(User).where(User.name == name)
            )).scalar_one()
        )


async def test_idle_and_absolute_timeouts(engine: AsyncEngine, client: Browser, clock: FakeClock) -> None:
    await add_user(engine, "ops", PASSWORD)
    assert (await client.login("ops", PASSWORD)).status_code == 303
    assert (await client.get("/jobs")).status_code == 200
    clock.advance(601)  # idle for longer than 10 minutes
    assert (await client.get("/jobs")).headers["location"] == "/login?next=/jobs"
    assert await sessions_of(engine, "ops") == 0  # the ended session is gone from the table

    assert (await client.login("ops", PASSWORD)).status_code == 303
    answers = []
    for _ in range(7):  # busy, never idle for 10 minutes, for 69 minutes: the absolute limit of 1 h ends it
        clock.advance(590)
        answers.append((await client.get("/jobs")).status_code)
    assert answers == [200] * 6 + [303]  # 59 minutes in: still on; 69: ended


async def test_a_login_makes_a_new_identifier_and_ends_the_old_one(engine: AsyncEngine, client: Browser) -> None:
    await add_user(engine, "ops", PASSWORD)
    await client.login("ops", PASSWORD)
    first = client.client.cookies["crawlherd_session"]
    await client.login("ops", PASSWORD)
    assert client.client.cookies["crawlherd_session"] != first
    assert await sessions_of(engine, "ops") == 1  # the session the second login replaced is gone
    client.client.cookies.set("crawlherd_session", first)
    assert (await client.get("/jobs")).status_code == 303


async def test_existing_users_become_admins(db_url: str) -> None:
    await upgrade(db_url, "0004")
    engine = create_engine(db_url)
    try:
        async with engine.begin() as conn:  # a user as migration 0004 made them: no role column yet
            now = await db_now(conn)
            await conn.execute(
                text("INSERT INTO users (name, password_hash, created_at) VALUES ('old', 'x', :now)"),
                {"now": now if conn.dialect.name != "sqlite" else now.replace(tzinfo=None)},
            )
        await upgrade(engine)
        assert [(u.name, u.role) for u in await list_users(engine)] == [("old", Role.ADMIN)]
    finally:
        await engine.dispose()


async def test_the_first_user_is_admin_and_the_last_admin_stays(engine: AsyncEngine) -> None:
    assert await add_user(engine, "first", PASSWORD) == Role.ADMIN
    assert await add_user(engine, "second", PASSWORD) == Role.VIEWER
    with pytest.raises(CrawlherdError, match="last admin"):
        await set_role(engine, "first", Role.OPERATOR, actor="test")
    with pytest.raises(CrawlherdError, match="last admin"):
        await remove_user(engine, "first", actor="test")
    await set_role(engine, "second", Role.ADMIN, actor="test")
    await set_role(engine, "first", Role.OPERATOR, actor="test")
    assert {u.name: u.role for u in await list_users(engine)} == {"first": Role.OPERATOR, "second": Role.ADMIN}


def test_an_endpoint_that_does_not_say_its_role_is_refused() -> None:
    async def bare(_: object) -> PlainTextResponse:
        return PlainTextResponse("x")

    with pytest.raises(RuntimeError, match="does not say which role"):
        _check_guarded([Route("/bare", bare, methods=["POST"])])


def run(url: str, *args: str, stdin: str | None = None) -> str:
    result = CliRunner().invoke(main, [*args, "--database-url", url], input=stdin)
    assert result.exit_code == 0, result.output
    return result.output


def test_users_cli_roles_and_logout(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    asyncio.run(upgrade(url))
    run(url, "users", "add", "boss", "--password-stdin", stdin=PASSWORD + "\n")
    run(url, "users", "add", "ops", "--role", "operator", "--password-stdin", stdin=PASSWORD + "\n")
    run(url, "users", "role", "ops", "viewer")
    users = json.loads(run(url, "users", "list", "--json"))
    assert [(u["name"], u["role"], u["sessions"]) for u in users] == [("boss", "admin", 0), ("ops", "viewer", 0)]
    assert "0 session(s) of ops ended" in run(url, "users", "logout", "ops")
    refused = CliRunner().invoke(main, ["users", "role", "boss", "viewer", "--database-url", url])
    assert refused.exit_code == 2 and "last admin" in refused.output


async def test_an_operator_operates_and_does_not_administer(engine: AsyncEngine, client: Browser) -> None:
    await add_user(engine, "boss", PASSWORD)
    await add_user(engine, "ops", PASSWORD, role=Role.OPERATOR)
    await add_site(engine, "site", "https://jobs.example.com")
    target = await add_target(engine, "site", "python")
    await client.login("ops", PASSWORD)
    assert (await client.post(f"/targets/{target}/run", {"key": "k"})).status_code == 303
    assert (await client.post(f"/targets/{target}/active", {"active": "0"})).status_code == 303
    async with engine.connect() as conn:
        website = (await conn.execute(select(Website.id))).scalar_one()
    for path in (f"/targets/{target}/delete", f"/websites/{website}/delete", "/targets/import", "/users/add"):
        answer = await client.post(path, {"confirm": "site", "name": "x", "password": PASSWORD})
        assert answer.status_code == 403 and "needs the admin role" in answer.text, path
    page = (await client.get(f"/targets/{target}")).text
    assert 'id="run-now"' in page and "/delete" not in page and 'data-role="operator"' in page


async def test_unknown_filter_values_are_errors(engine: AsyncEngine, client: Browser) -> None:
    await add_site(engine, "site", "https://jobs.example.com")
    for path, word in (("/targets?state=inactive", "state"), ("/jobs?status=nope", "status"),
                       ("/jobs?website=nope", "website"), ("/items?website=nope", "website"),
                       ("/dead-letters?website=nope", "website"), ("/targets?website=nope", "website"),
                       ("/items/export?website=nope", "website")):
        answer = await client.get(path)
        assert answer.status_code == 400 and f"unknown {word}" in answer.text, path
        assert '<nav>' in answer.text  # in the layout (open mode: no user yet)
    assert (await client.get("/targets?state=due&website=site")).status_code == 200


async def test_a_slot_claimed_seconds_ago_is_no_alarm(engine: AsyncEngine) -> None:
    await add_site(engine, "site", "https://jobs.example.com")
    target = await add_target(engine, "site", "python")
    relay = Heartbeat(engine, kind="dispatcher", name="d1", interval=3600)
    await relay.register()
    await run_now(engine, target, requested_by="test")
    assert (await explain(engine, target)).verdict == "in_outbox"
    async with engine.begin() as conn:
        await conn.execute(update(DispatchOutbox).values(
            created_at=await db_now(conn) - OUTBOX_PATIENCE - timedelta(seconds=1)))
    assert (await explain(engine, target)).verdict == "stuck_in_outbox"


async def test_a_retried_job_keeps_every_attempt(engine: AsyncEngine) -> None:
    from crawlherd.console.jobs import get_job

    await add_site(engine, "site", "https://jobs.example.com")
    target = await add_target(engine, "site", "python")
    run_id = await a_retried_dead_job(engine, target, error="HTTP 500 every time")
    job = await get_job(engine, run_id)
    assert [(a.attempt, a.status, a.error) for a in job.history] == [
        (1, "failed", "HTTP 503 from the site"), (2, "dead", "HTTP 500 every time"), (3, "succeeded", None)
    ]
