"""The console over HTTP (httpx on the ASGI app, SQLite): login, CSRF, escaping, secrets, run now,
the schedule preview, import, dead letters, export, the audit trail."""

from __future__ import annotations

import html
import json
import re
from urllib.parse import unquote

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.console.users import add_user
from crawlherd.db.models import AuditEntry, DispatchOutbox, JobRun, ManualRun, ScrapeTarget, Website
from crawlherd.errors import ConfigurationError
from crawlherd.web.auth import check_bind
from tests.integration.console.conftest import Browser
from tests.support.console import add_site, add_target

PAGES = [
    "/",
    "/overview/live",
    "/websites",
    "/websites/new",
    "/targets",
    "/targets/new",
    "/targets/import",
    "/jobs",
    "/dead-letters",
    "/items",
    "/frontier",
    "/audit",
]


async def count(engine: AsyncEngine, model: type, *where: object) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(model).where(*where))).scalar_one())  # type: ignore[arg-type]


async def test_open_mode_on_loopback_without_users(browser: Browser) -> None:
    page = await browser.get("/")
    assert page.status_code == 200 and "open mode" in page.text


async def test_no_session_means_the_login_page(engine: AsyncEngine, browser: Browser) -> None:
    await add_user(engine, "ops", "correct horse battery")
    for path in PAGES:
        page = await browser.get(path)
        assert page.status_code == 303 and page.headers["location"].startswith("/login"), path
    assert (await browser.client.post("/targets", data={})).status_code == 401


async def test_wrong_password_gives_no_session(engine: AsyncEngine, browser: Browser) -> None:
    await add_user(engine, "ops", "correct horse battery")
    wrong = await browser.login("ops", "wrong password!")
    assert wrong.status_code == 401 and "wrong name or password" in wrong.text
    assert (await browser.get("/")).status_code == 303
    nobody = await browser.login("nobody", "correct horse battery")
    assert nobody.status_code == 401
    assert (await browser.get("/")).status_code == 303


async def test_login_sets_a_strict_httponly_session(engine: AsyncEngine, browser: Browser) -> None:
    await add_user(engine, "ops", "correct horse battery")
    ok = await browser.login("ops", "correct horse battery")
    assert ok.status_code == 303
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = await browser.get("/")
    assert page.status_code == 200 and "ops" in page.text
    await browser.post("/logout")
    assert (await browser.get("/")).status_code == 303


async def test_every_form_needs_its_csrf_token(engine: AsyncEngine, browser: Browser) -> None:
    await add_site(engine, "site", "https://jobs.example.com")
    tid = await add_target(engine, "site", "python")
    posts = [
        "/login",
        "/logout",
        "/websites",
        "/websites/1",
        "/websites/1/active",
        "/websites/1/delete",
        "/targets",
        "/targets/import",
        f"/targets/{tid}/run",
        f"/targets/{tid}/active",
        f"/targets/{tid}/delete",
        f"/targets/{tid}/schedule",
        "/dead-letters/retry",
        "/dead-letters/1/discard",
    ]
    await browser.token()  # a session with a token exists: only the form lacks it
    for path in posts:
        missing = await browser.client.post(path, data={"name": "x"})
        assert missing.status_code == 403, path
        forged = await browser.client.post(path, data={"csrf": "forged"})
        assert forged.status_code == 403, path
    assert await count(engine, ManualRun) == 0
    assert await count(engine, AuditEntry, AuditEntry.actor != "test") == 0


async def test_keywords_are_escaped(engine: AsyncEngine, browser: Browser) -> None:
    await add_site(engine, "site", "https://jobs.example.com")
    tid = await add_target(engine, "site", "<script>alert(1)</script>")
    for path in ("/targets", f"/targets/{tid}", "/jobs"):
        page = await browser.get(path)
        assert "<script>alert(1)</script>" not in page.text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in (await browser.get(f"/targets/{tid}")).text


async def test_secrets_never_reach_a_page(engine: AsyncEngine, browser: Browser) -> None:
    await add_site(
        engine,
        "secretive",
        "https://robot:hunter2secret@jobs.example.com",
        path="/search?api_key=TOPSECRET42&x=1",
    )
    tid = await add_target(engine, "secretive", "python")
    await browser.post(f"/targets/{tid}/run", {"key": "k1"})
    from crawlherd.messages import decode_job
    from crawlherd.worker.runs import RunStore

    async with engine.connect() as conn:
        job = decode_job((await conn.execute(select(DispatchOutbox.body))).scalar_one().encode())
    store = RunStore(engine)
    await store.start(job, worker="w")  # the job's error quotes its URL, secret and all
    await store.finish(job, status="dead", error=f"listing page {job.search_url} failed: HTTP 500")
    assert "TOPSECRET42" in job.search_url
    more = [f"/targets/{tid}", "/websites/1", "/overview.json", "/targets?format=json", "/jobs?format=json", "/jobs/1"]
    for path in [*PAGES, *more]:
        page = await browser.get(path)
        assert page.status_code == 200, path
        assert "hunter2secret" not in page.text and "TOPSECRET42" not in page.text, path
    assert "robot:***@jobs.example.com" in (await browser.get("/websites")).text


async def test_run_now_is_exactly_once_however_often_clicked(engine: AsyncEngine, browser: Browser) -> None:
    await add_site(engine, "site", "https://jobs.example.com")
    tid = await add_target(engine, "site", "python")
    page = (await browser.get(f"/targets/{tid}")).text
    key = re.search(r'name="key" value="([^"]+)"', page)
    assert key
    for _ in range(3):  # the same form sent three times (a double click and a reload)
        done = await browser.post(f"/targets/{tid}/run", {"key": key.group(1)})
        assert done.status_code == 303
    again = await browser.post(f"/targets/{tid}/run", {"key": "another-click"})  # a new click, the first still queued
    assert "already queued" in unquote(again.headers["location"])
    assert await count(engine, DispatchOutbox, DispatchOutbox.target_id == tid) == 1
    assert await count(engine, ManualRun) == 1
    audit = await browser.get("/audit")
    assert "target.run_now" in audit.text and "local" in audit.text


async def test_schedule_preview_validates_as_you_type(browser: Browser) -> None:
    good = (
        await browser.get("/api/schedule-preview", params={"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"})
    ).json()
    assert good["ok"] and len(good["runs"]) == 10
    assert all(run["local"].endswith(("CET", "CEST")) and " 07:00:00 " in run["local"] for run in good["runs"])
    bad = (await browser.get("/api/schedule-preview", params={"cron": "61 * * * *"})).json()
    assert not bad["ok"] and bad["errors"]
    zone = (await browser.get("/api/schedule-preview", params={"every": "1h", "timezone": "Mars/Base"})).json()
    assert not zone["ok"] and "timezone" in zone["errors"]


async def test_target_form_errors_and_creation(engine: AsyncEngine, browser: Browser) -> None:
    await add_site(engine, "site", "https://jobs.example.com")
    bad = await browser.post(
        "/targets", {"website": "site", "keywords": "python", "every": "soon"}, page="/targets/new"
    )
    assert bad.status_code == 400 and "every" in bad.text
    ok = await browser.post(
        "/targets",
        {
            "website": "site",
            "keywords": "python, rust",
            "locations": "berlin",
            "every": "2h",
            "timezone": "Europe/Berlin",
        },
        page="/targets/new",
    )
    assert ok.status_code == 303
    listing = await browser.get("/targets", params={"q": "rust"})
    assert (
        "rust" in listing.text
        and "python" not in re.sub(r"<option[^>]*>[^<]*</option>", "", listing.text).split("<table")[1]
    )


async def test_import_is_all_or_nothing_with_errors_by_line(engine: AsyncEngine, browser: Browser) -> None:
    bad = "\n".join(
        [
            "[[websites]]",
            'name = "site"',
            'base_url = "https://jobs.example.com"',
            'search_url_template = "https://jobs.example.com/s?q={keywords}"',
            "",
            "[[targets]]",
            'website = "site"',
            'keywords = ["python"]',
            'every = "1h"',
            "",
            "[[targets]]",
            'website = "site"',
            'keywords = ["rust"]',
            'cron = "not a cron"',
            "",
        ]
    )
    refused = await browser.post("/targets/import", {"text": bad, "format": "toml"}, page="/targets/import")
    assert refused.status_code == 400 and "targets[1]" in refused.text
    assert (await browser.get("/targets")).text.count('/targets/1"') == 0
    good = bad.replace('cron = "not a cron"', 'cron = "0 7 * * *"')
    accepted = await browser.post("/targets/import", {"text": good, "format": "toml"}, page="/targets/import")
    assert accepted.status_code == 200 and "targets 2 new" in accepted.text


async def test_dead_letters_retry_through_the_outbox_and_discard(engine: AsyncEngine, browser: Browser) -> None:
    from crawlherd.dispatch.outbox import tick
    from crawlherd.messages import decode_job
    from crawlherd.worker.runs import RunStore

    await add_site(engine, "site", "https://jobs.example.com")
    t1 = await add_target(engine, "site", "python", every="1h")
    t2 = await add_target(engine, "site", "rust", every="1h")
    await browser.post(f"/targets/{t1}/run", {"key": "a"})
    await browser.post(f"/targets/{t2}/run", {"key": "b"})
    await tick(engine, batch_size=10, max_slots_per_target=1)
    async with engine.connect() as conn:
        bodies = (await conn.execute(select(DispatchOutbox.body))).scalars().all()
    store = RunStore(engine)
    for body in bodies:
        job = decode_job(body.encode())
        await store.start(job, worker="w1")
        await store.finish(job, status="dead", error="HTTP 500 from the site")
    page = await browser.get("/dead-letters")
    assert page.text.count('class="retry"') == 2 and "HTTP 500 from the site" in page.text
    run_ids = [int(i) for i in re.findall(r'name="run_id" value="(\d+)"', page.text)]
    retried = await browser.post("/dead-letters/retry", {"run_id": run_ids[0]}, page="/dead-letters")
    assert "1 job(s) sent again" in unquote(retried.headers["location"])
    async with engine.connect() as conn:
        assert (await conn.execute(select(JobRun.status).where(JobRun.id == run_ids[0]))).scalar_one() == "queued"
        pending = (await conn.execute(select(func.count()).where(DispatchOutbox.status == "pending"))).scalar_one()
    assert pending >= 1
    await browser.post(f"/dead-letters/{run_ids[1]}/discard", {"reason": "site retired"}, page="/dead-letters")
    assert "no dead letters" in (await browser.get("/dead-letters")).text
    assert "deadletter.discard" in (await browser.get("/audit")).text


async def test_items_export(engine: AsyncEngine, browser: Browser) -> None:
    from datetime import UTC, datetime

    from crawlherd.item import Item
    from crawlherd.sinks import SQLSink

    await add_site(engine, "site", "https://jobs.example.com")
    tid = await add_target(engine, "site", "python")
    items = [
        Item(
            website="site",
            url=f"https://jobs.example.com/j/{i}",
            fingerprint=bytes([i]) * 16,
            fields={"title": f"Job {i}", "location": "Berlin"},
        )
        for i in range(3)
    ]
    items.append(Item(website="site", url="javascript:alert(1)", fingerprint=b"x" * 16, fields={"title": "Sly"}))
    await SQLSink(engine).upsert(items, website_id=1, target_id=tid, seen_at=datetime.now(UTC))
    assert 'href="javascript:' not in (await browser.get("/items")).text and "Sly" in (await browser.get("/items")).text
    csv_text = (await browser.get("/items/export", params={"format": "csv"})).text
    assert csv_text.splitlines()[0].startswith("website,url") and len(csv_text.splitlines()) == 5
    lines = (await browser.get("/items/export", params={"format": "jsonl"})).text.splitlines()
    assert sorted(json.loads(line)["title"] for line in lines) == ["Job 0", "Job 1", "Job 2", "Sly"]
    assert "Job 2" in (await browser.get("/items", params={"q": "job 2"})).text


def test_refuses_a_public_address_without_users() -> None:
    with pytest.raises(ConfigurationError, match="no user is defined"):
        check_bind("0.0.0.0", 0)
    check_bind("0.0.0.0", 1)
    check_bind("127.0.0.1", 0)
    check_bind("::1", 0)


async def test_a_website_is_edited_enabled_disabled_and_deleted(engine: AsyncEngine, browser: Browser) -> None:
    """Every SiteSpec field from the form; secrets never shown and kept when sent back as shown; enable
    and disable all its targets; delete only with its name typed, saying what goes with it; audited."""
    await add_site(engine, "site", "https://robot:hunter2secret@jobs.example.com", path="/search?api_key=TOPSECRET42")
    tids = [await add_target(engine, "site", kw) for kw in ("python", "rust")]
    page = (await browser.get("/websites/1")).text
    assert "hunter2secret" not in page and "TOPSECRET42" not in page
    assert "2 target(s), 2 active" in page and "deletes its <b>2</b> target(s)" in page
    shown = dict(re.findall(r'<input name="([a-z_]+)" value="([^"]*)"', page))
    extraction = re.search(r'<textarea name="extraction"[^>]*>([^<]*)</textarea>', page)
    assert extraction and shown["base_url"] == "https://robot:***@jobs.example.com"
    form = {
        **{k: html.unescape(v) for k, v in shown.items()},
        "extraction": html.unescape(extraction.group(1)),
        "pagination_type": "next_link", "pagination_selector": "a.next", "pagination_max_pages": "4",
        "min_delay": "2.5s", "max_concurrency": "3", "robots": "obey", "revisit_age": "2d",
        "requires_playwright": "on", "metadata": '{"team": "search"}',
    }
    saved = await browser.post("/websites/1", form, page="/websites/1")
    assert saved.status_code == 303 and "website saved" in unquote(saved.headers["location"])
    _site, spec = await _stored_site(engine)
    assert spec["base_url"] == "https://robot:hunter2secret@jobs.example.com"  # sent back as shown: kept
    assert "TOPSECRET42" in spec["search_url_template"]
    assert spec["pagination"] == {**spec["pagination"], "type": "next_link", "selector": "a.next", "max_pages": 4}
    assert spec["politeness"] == {"min_delay": 2.5, "max_concurrency": 3, "robots": "obey"}
    assert (spec["revisit_age"], spec["requires_playwright"], spec["metadata"]) == (172800.0, True, {"team": "search"})
    assert spec["extraction"]["item_selector"] == "article.job-card"  # unchanged

    # a bad value: a clear error by field, nothing changed, no secret echoed
    bad = await browser.post("/websites/1", {**form, "pagination_selector": "", "max_concurrency": "0"},
                             page="/websites/1")
    assert bad.status_code == 400 and "selector" in bad.text and "max_concurrency" in bad.text
    assert "hunter2secret" not in bad.text and "TOPSECRET42" not in bad.text
    assert (await _stored_site(engine))[1] == spec
    # a new URL replaces the stored one
    new_base = {**form, "base_url": "https://jobs2.example.com"}
    assert (await browser.post("/websites/1", new_base, page="/websites/1")).status_code == 303
    assert (await _stored_site(engine))[1]["base_url"] == "https://jobs2.example.com"

    off = await browser.post("/websites/1/active", {"active": "0"}, page="/websites/1")
    assert "2 target(s) disabled" in unquote(off.headers["location"])
    assert "2 target(s), 0 active" in (await browser.get("/websites/1")).text
    on = await browser.post("/websites/1/active", {"active": "1"}, page="/websites/1")
    assert "2 target(s) enabled" in unquote(on.headers["location"])

    refused = await browser.post("/websites/1/delete", {"confirm": "not-its-name"}, page="/websites/1")
    assert "not deleted" in unquote(refused.headers["location"])
    assert await count(engine, ScrapeTarget) == 2
    gone = await browser.post("/websites/1/delete", {"confirm": "site"}, page="/websites/1")
    assert "website site deleted with its 2 target(s), 0 job run(s) and 0 item(s)" in unquote(gone.headers["location"])
    assert await count(engine, ScrapeTarget) == 0 and await count(engine, Website) == 0
    assert (await browser.get("/websites/1")).status_code == 404
    actions = [a for (a,) in (await _audit(engine))]
    for action in ("website.update", "website.disable", "website.enable", "website.delete"):
        assert action in actions, actions
    assert tids


async def test_a_new_website_from_the_form(engine: AsyncEngine, browser: Browser) -> None:
    form = {
        "name": "fresh", "base_url": "https://fresh.example.com",
        "search_url_template": "https://fresh.example.com/s?q={keywords}", "pagination_type": "page_param",
        "pagination_param": "p", "pagination_start": "0", "pagination_step": "10", "min_delay": "500ms",
        "max_concurrency": "1", "robots": "ignore", "revisit_age": "6h",
        "extraction": '{"item_selector": "li", "fields": {"title": "a"}}',
    }
    bad = await browser.post("/websites", {**form, "extraction": "{not json"}, page="/websites/new")
    assert bad.status_code == 400 and "not valid JSON" in bad.text and await count(engine, Website) == 0
    done = await browser.post("/websites", form, page="/websites/new")
    assert done.status_code == 303
    _site, spec = await _stored_site(engine)
    assert spec["pagination"] == {**spec["pagination"], "type": "page_param", "param": "p", "start": 0, "step": 10}
    assert (spec["politeness"]["min_delay"], spec["revisit_age"]) == (0.5, 21600.0)


async def _stored_site(engine: AsyncEngine) -> tuple[str, dict[str, object]]:
    async with engine.connect() as conn:
        row = (await conn.execute(select(Website.name, Website.spec))).one()
    return row.name, row.spec


async def _audit(engine: AsyncEngine) -> list[tuple[str]]:
    async with engine.connect() as conn:
        return [tuple(r) for r in (await conn.execute(select(AuditEntry.action))).all()]


async def test_a_taken_console_port_is_refused_at_once_and_run_falls_back(engine: AsyncEngine) -> None:
    """Two processes asking for the same console port: the second is refused when it binds (the port is
    listened on at once), not later inside the server -- and ``run``/``demo`` then take a free port."""
    from crawlherd.cli._console import console_or_none
    from crawlherd.web.server import serve_console

    async with serve_console(engine, port=0, heartbeat=False) as first:
        with pytest.raises(OSError, match="in use"):
            async with serve_console(engine, port=first.port, heartbeat=False):
                pass
        async with console_or_none(engine, first.port) as second:
            assert second is not None and second.port != first.port
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"{second.url}login")).status_code == 200
