"""The console as an attacker and as each role sees it, in a real headless Chromium (Playwright driving
the system Chromium), one browser and one console for the module:

- a session cookie copied before logout, before the user's removal, before an admin ended the user's
  sessions or before a password change is refused afterwards, by the page and by a form post;
- repeated wrong passwords block the name, then the address, even for the right password, until the
  (injected) clock has moved past the delay; every login is in the audit trail;
- every page -- each GET route of the app, errors, static files, the anonymous login page -- has the
  security headers and no inline script or style, and Chromium reports no CSP violation;
- a page of another origin that frames the console gets nothing rendered;
- a viewer is refused every state-changing route (enumerated from the app, so a new route cannot be
  left out) and nothing changes; the page shows the role and no control the role may not use;
- the operator's view: a retried job with every attempt, a disabled target without a next run, a long
  error wrapped, the anonymous login page without navigation, error pages in the layout.

Screenshots go to ``$CRAWLHERD_CONSOLE_SCREENSHOTS`` when set, else to a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.routing import Route

from crawlherd.clock import FakeClock
from crawlherd.console.audit import list_audit
from crawlherd.console.editing import set_target_active
from crawlherd.console.sessions import SessionPolicy
from crawlherd.console.users import Role, add_user, remove_user
from crawlherd.db import create_engine, upgrade
from crawlherd.db.models import ScrapeTarget, User, Website
from crawlherd.fetch.browser import CHROMIUM_ARGS
from crawlherd.web.auth import needed_role
from crawlherd.web.headers import SECURITY_HEADERS
from crawlherd.web.server import serve_console
from tests.support.console import CARD_RULES, a_retried_dead_job, add_site, add_target
from tests.support.httpserver import start_app

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("console-browser"),  # one Chromium and one console for the whole module
    pytest.mark.asyncio(loop_scope="module"),
]

PASSWORD = "correct horse battery"
LONG_ERROR = "HTTP 500 at https://jobs.example.com/search/" + "very-long-path-segment-" * 12 + "?q=python"
#: State-changing routes a viewer may use: their own login and logout.
VIEWER_MAY_POST = {"/login", "/logout"}
_INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>|\son[a-z]+\s*=|\sstyle\s*=", re.I)
_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


@dataclass
class Console:
    base: str
    engine: AsyncEngine
    clock: FakeClock
    policy: SessionPolicy
    routes: list[Route]
    ids: dict[str, int]
    shots: Path

    def path(self, template: str) -> str:
        return _PARAM.sub(lambda m: str(self.ids[m.group(1)]), template)


async def _data(engine: AsyncEngine) -> dict[str, int]:
    for name, role in (("root", Role.ADMIN), ("ops", Role.OPERATOR), ("eve", Role.VIEWER)):
        await add_user(engine, name, PASSWORD, role=role, actor="test")
    fields = {**CARD_RULES["fields"], **{f"field_{i}": f"div.card > span.value-{i}" for i in range(30)}}
    long_rules = {**CARD_RULES, "fields": fields}
    await add_site(engine, "demo", "https://jobs.example.com", extraction=long_rules)
    target = await add_target(engine, "demo", "python", "berlin")
    idle = await add_target(engine, "demo", "rust", "paris")
    await set_target_active(engine, idle, False, actor="test")
    run_id = await a_retried_dead_job(engine, target, error=LONG_ERROR)
    async with engine.connect() as conn:
        website = (await conn.execute(select(Website.id).where(Website.name == "demo"))).scalar_one()
    return {"target_id": target, "idle_id": idle, "website_id": website, "run_id": run_id}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def console(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Console]:
    home = tmp_path_factory.mktemp("console-security")
    url = f"sqlite:///{home}/config.db"
    await upgrade(url)
    engine = create_engine(url)
    clock = FakeClock(start=time.time())
    policy = SessionPolicy(clock=clock, free_failures=3, first_delay=60.0, max_delay=3600.0)
    shots = Path(os.environ.get("CRAWLHERD_CONSOLE_SCREENSHOTS") or home / "shots")
    os.makedirs(shots, exist_ok=True)  # noqa: ASYNC230 - once, before anything runs
    try:
        ids = await _data(engine)
        async with serve_console(engine, port=0, heartbeat=False, session_policy=policy) as served:
            app = served.server.config.app
            routes = [r for r in app.routes if isinstance(r, Route)]
            yield Console(served.url.rstrip("/"), engine, clock, policy, routes, ids, shots)
    finally:
        await engine.dispose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium_browser(chromium: str) -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, headless=True, args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            await browser.close()


@pytest_asyncio.fixture(loop_scope="module")
async def context(chromium_browser: Any) -> AsyncIterator[Any]:
    ctx = await chromium_browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        yield ctx
    finally:
        await ctx.close()


async def log_in(ctx: Any, console: Console, name: str, password: str = PASSWORD) -> Any:
    page = await ctx.new_page()
    await page.goto(console.base + "/login")
    await page.fill("input[name=name]", name)
    await page.fill("input[name=password]", password)
    await page.click("button[type=submit]")
    return page


async def csrf_of(page: Any) -> str:
    return str(await page.get_attribute("meta[name=csrf-token]", "content"))


async def target_active(console: Console) -> bool:
    async with console.engine.connect() as conn:
        return bool(
            (await conn.execute(select(ScrapeTarget.active).where(ScrapeTarget.id == console.ids["target_id"])))
            .scalar_one()
        )


async def test_an_old_cookie_is_refused_after_logout(console: Console, context: Any, chromium_browser: Any) -> None:
    page = await log_in(context, console, "ops")
    await page.goto(f"{console.base}/targets/{console.ids['target_id']}")
    assert "ops" in await page.inner_text("#who") and await page.get_attribute("#who", "data-role") == "operator"
    copied, token = await context.cookies(), await csrf_of(page)
    await page.click("header form[action='/logout'] button")
    assert "/login" in page.url

    attacker = await chromium_browser.new_context()
    try:
        await attacker.add_cookies(copied)
        stolen = await attacker.new_page()
        await stolen.goto(f"{console.base}/targets/{console.ids['target_id']}")
        assert "/login" in stolen.url  # the copied cookie opens nothing
        posted = await stolen.request.post(
            f"{console.base}/targets/{console.ids['target_id']}/active",
            form={"csrf": token, "active": "0"}, max_redirects=0,
        )
        assert posted.status == 401
        assert await target_active(console)  # the "disable" of the copied cookie did nothing
    finally:
        await attacker.close()


@pytest.mark.slow
async def test_ended_sessions_removal_revoke_and_new_password(
    console: Console, context: Any, chromium_browser: Any
) -> None:
    # The admin adds a user in the browser; that user logs in elsewhere.
    admin = await log_in(context, console, "root")
    await admin.goto(console.base + "/users")
    await admin.fill("#user-add input[name=name]", "temp")
    await admin.fill("#user-add input[name=password]", PASSWORD)
    await admin.select_option("#user-add select[name=role]", "operator")
    await admin.click("#user-add button[type=submit]")
    assert "user temp added as operator" in await admin.inner_text("#flash")

    async def temp_session() -> tuple[Any, list[Any]]:
        ctx = await chromium_browser.new_context()
        page = await log_in(ctx, console, "temp")
        assert await page.get_attribute("#who", "data-role") == "operator"
        return ctx, await ctx.cookies()

    async def refused(cookies: list[Any]) -> bool:
        ctx = await chromium_browser.new_context()
        try:
            await ctx.add_cookies(cookies)
            page = await ctx.new_page()
            await page.goto(console.base + "/jobs")
            return "/login" in page.url
        finally:
            await ctx.close()

    # An admin ends the user's sessions.
    ctx, cookies = await temp_session()
    await admin.goto(console.base + "/users")
    await admin.screenshot(path=str(console.shots / "users.png"), full_page=True)
    await admin.click("tr[data-user=temp] form.user-revoke button")
    assert "1 session(s) of temp ended" in await admin.inner_text("#flash")
    assert await refused(cookies)
    await ctx.close()

    # A new password (here from the CLI's model function) ends them too.
    ctx, cookies = await temp_session()
    await add_user(console.engine, "temp", "another long password", actor="cli")
    assert await refused(cookies)
    await ctx.close()

    # The admin removes the user in the browser: their session goes with them.
    ctx = await chromium_browser.new_context()
    page = await log_in(ctx, console, "temp", "another long password")
    cookies = await ctx.cookies()
    await admin.goto(console.base + "/users")
    await admin.fill("tr[data-user=temp] form.user-remove input[name=confirm]", "temp")
    await admin.click("tr[data-user=temp] form.user-remove button")
    assert "user temp removed" in await admin.inner_text("#flash")
    await page.reload()
    assert "/login" in page.url
    assert await refused(cookies)
    await ctx.close()

    actions = [(a.actor, a.action) for a in await list_audit(console.engine, limit=50) if a.subject == "user:temp"]
    for expected in (("root", "user.add"), ("root", "user.sessions.revoke"), ("cli", "user.password"),
                     ("root", "user.remove"), ("temp", "login")):
        assert expected in actions, actions


async def test_removal_from_the_cli_ends_the_session(console: Console, chromium_browser: Any) -> None:
    await add_user(console.engine, "leaver", PASSWORD, role=Role.VIEWER, actor="test")
    ctx = await chromium_browser.new_context()
    try:
        page = await log_in(ctx, console, "leaver")
        await page.goto(console.base + "/jobs")
        assert "/jobs" in page.url
        assert await remove_user(console.engine, "leaver", actor="cli")
        await page.reload()
        assert "/login" in page.url
    finally:
        await ctx.close()


async def test_wrong_passwords_are_throttled_by_name_and_by_address(console: Console, context: Any) -> None:
    page = await context.new_page()
    await page.goto(console.base + "/login")

    async def attempt(name: str, password: str) -> str:
        await page.fill("input[name=name]", name)
        await page.fill("input[name=password]", password)
        await page.click("button[type=submit]")
        return await page.inner_text("#login-error") if await page.locator("#login-error").count() else ""

    for _ in range(console.policy.free_failures):
        assert await attempt("ops", "not the password") == "wrong name or password"
    assert await attempt("ops", "not the password") == "wrong name or password"  # this one starts the delay
    throttled = await attempt("ops", PASSWORD)  # the right password, straight after: refused
    assert throttled.startswith("too many failed logins: try again in")
    await page.screenshot(path=str(console.shots / "login-throttled.png"))
    console.clock.advance(console.policy.delay(console.policy.free_failures + 1) + 1)
    assert await attempt("ops", PASSWORD) == ""
    assert "/login" not in page.url

    # The address is counted too: guessing other names from it is slowed down as well.
    await page.goto(console.base + "/login")
    assert await attempt("nobody", "guess") == "wrong name or password"  # its 5th failure: a longer delay
    assert (await attempt("eve", PASSWORD)).startswith("too many failed logins")

    entries = [a for a in await list_audit(console.engine, limit=50) if a.action.startswith("login")]
    by_action = [(a.actor, a.action) for a in entries]
    assert by_action.count(("ops", "login.failed")) == 4 and ("ops", "login.throttled") in by_action
    assert ("ops", "login") in by_action and ("eve", "login.throttled") in by_action
    assert all(a.detail["client"] == "127.0.0.1" for a in entries)
    console.clock.advance(console.policy.forget_after + console.policy.max_delay)  # forget them all


async def test_every_page_has_the_headers_and_no_inline_code(console: Console, context: Any) -> None:
    anonymous = await context.new_page()
    violations: list[str] = []
    anonymous.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    response = await anonymous.goto(console.base + "/login")
    assert response is not None and _headers_ok(await response.all_headers())
    assert await anonymous.locator("header nav").count() == 0  # no navigation before a login
    assert await anonymous.locator("#who").count() == 0
    await anonymous.screenshot(path=str(console.shots / "login-anonymous.png"))

    page = await log_in(context, console, "root")
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    gets = [r.path for r in console.routes if "GET" in (r.methods or ())]
    assert len(gets) >= 15
    extra = ["/static/console.css", "/static/console.js", "/no-such-page", "/targets?state=inactive",
             "/jobs?website=nope", f"/targets/{console.ids['target_id']}/schedule"]
    for path in [console.path(p) for p in gets] + extra:
        answer = await page.request.get(console.base + path, max_redirects=0)
        assert _headers_ok(answer.headers), path
        if answer.headers.get("content-type", "").startswith("text/html"):
            body = await answer.text()
            assert not _INLINE.search(body), f"{path}: {_INLINE.search(body)}"
            if answer.status < 300:
                await page.goto(console.base + path)
    post = await page.request.post(console.base + "/targets/new", form={}, max_redirects=0)  # 405
    assert _headers_ok(post.headers)
    assert violations == []

    # An error page is a page of the console, with its layout and navigation.
    await page.goto(console.base + "/targets?state=inactive")
    assert "unknown state 'inactive'" in await page.inner_text("#error-message")
    assert await page.locator("header nav").count() == 1
    await page.screenshot(path=str(console.shots / "error-400.png"))
    await page.goto(console.base + "/no-such-page")
    assert await page.inner_text("h1") == "404" and await page.locator("header nav").count() == 1


def _headers_ok(headers: dict[str, Any]) -> bool:
    """``headers``: Playwright's (lowercase names; a value or a list of values)."""
    got = {k.lower(): (v if isinstance(v, str) else ", ".join(v)) for k, v in headers.items()}
    return all(got.get(name) == value for name, value in SECURITY_HEADERS.items())


async def test_a_framed_console_does_not_render(console: Console, context: Any) -> None:
    page = await log_in(context, console, "root")  # logged in: the frame would carry the session
    target = f"{console.base}/targets/{console.ids['target_id']}"

    async def decoy(_: web.Request) -> web.Response:
        return web.Response(
            text=f'<!doctype html><h1>Win a prize</h1><iframe id="victim" src="{target}" width="900" '
            'height="600"></iframe>', content_type="text/html")

    app = web.Application()
    app.router.add_get("/", decoy)
    served = await start_app(app)  # another origin (another port), the same site: the cookie would go
    try:
        await page.goto(served.url + "/")
        await page.wait_for_load_state("load")
        frames = [f for f in page.frames if f != page.main_frame]
        assert len(frames) == 1
        framed = frames[0]
        assert await framed.locator("#run-now").count() == 0  # nothing of the console rendered in it
        assert "Run now" not in await framed.content()
        await page.screenshot(path=str(console.shots / "framed.png"))
    finally:
        await served.close()


async def test_a_viewer_cannot_change_anything(console: Console, context: Any) -> None:
    page = await log_in(context, console, "eve")
    await page.goto(f"{console.base}/targets/{console.ids['target_id']}")
    assert await page.get_attribute("#who", "data-role") == "viewer"
    for control in ("#run-now", "form[action$='/active']", "form[action$='/delete']", "form[action$='/schedule']"):
        assert await page.locator(control).count() == 0, control
    await page.screenshot(path=str(console.shots / "target-as-viewer.png"), full_page=True)
    await page.goto(f"{console.base}/websites/{console.ids['website_id']}")
    assert await page.locator("#website-form button[type=submit]").count() == 0
    assert await page.locator("#website-form input[name=base_url]").is_disabled()
    await page.goto(f"{console.base}/users")
    assert "needs the admin role" in await page.inner_text("#error-message")

    before = await _state(console)
    token = await csrf_of(page)
    changing = [r for r in console.routes if set(r.methods or ()) - {"GET", "HEAD"}]
    guarded = {r.path for r in changing if (needed_role(r.endpoint)[1] or Role.VIEWER) > Role.VIEWER}
    assert guarded == {r.path for r in changing} - VIEWER_MAY_POST, "a state-changing route a viewer may use"
    form = {"csrf": token, "active": "0", "all": "1", "run_id": str(console.ids["run_id"]), "reason": "x",
            "confirm": "demo", "name": "ops", "role": "admin", "password": "a brand new password",
            "website": "demo", "keywords": "go", "every": "1h", "text": "[[targets]]\nwebsite = 'demo'\n",
            "base_url": "https://x.example", "search_url_template": "https://x.example/?q={keywords}"}
    refused = []
    for route in changing:
        if route.path in VIEWER_MAY_POST:
            continue
        answer = await page.request.post(console.base + console.path(route.path), form=form, max_redirects=0)
        assert answer.status == 403, (route.path, answer.status, (await answer.text())[:300])
        refused.append(route.path)
    assert len(refused) >= 15
    assert await _state(console) == before
    assert {a.action for a in await list_audit(console.engine, limit=200) if a.actor == "eve"} <= {
        "login", "login.throttled"  # (the throttling test's)
    }


async def _state(console: Console) -> tuple[Any, ...]:
    """Everything a viewer's forms could change."""
    async with console.engine.connect() as conn:
        targets = (await conn.execute(select(ScrapeTarget).order_by(ScrapeTarget.id))).all()
        sites = (await conn.execute(select(Website.name, Website.spec).order_by(Website.id))).all()
        users = (await conn.execute(select(User.name, User.role, User.password_hash).order_by(User.id))).all()
    audit = [(a.action, a.subject) for a in await list_audit(console.engine, limit=500) if a.actor != "eve"
             and not a.action.startswith("login")]
    return tuple(map(tuple, targets)), tuple(map(tuple, sites)), tuple(map(tuple, users)), tuple(audit)


async def test_the_operators_view(console: Console, context: Any) -> None:
    page = await log_in(context, console, "ops")
    # A retried dead job shows every attempt, the earlier failures with their errors.
    await page.goto(f"{console.base}/jobs/{console.ids['run_id']}")
    rows = await page.locator("#attempts tr").all_inner_texts()
    assert len(rows) == 4, rows  # the header and three attempts
    assert "HTTP 503" in rows[1] and "very-long-path-segment" in rows[2] and "succeeded" in rows[3]
    await page.screenshot(path=str(console.shots / "job-retried.png"), full_page=True)

    # A long error wraps: the page does not scroll sideways.
    await page.goto(f"{console.base}/jobs")
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    await page.goto(f"{console.base}/targets/{console.ids['target_id']}")
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # A disabled target shows no next run.
    await page.goto(f"{console.base}/targets/{console.ids['idle_id']}")
    assert "disabled" in await page.inner_text("#next-run") and await page.locator("#next-runs").count() == 0
    await page.screenshot(path=str(console.shots / "target-disabled.png"), full_page=True)
    await page.goto(f"{console.base}/targets")
    idle_row = page.locator(f"#targets tr:has(a[href='/targets/{console.ids['idle_id']}'])")
    idle_text = await idle_row.inner_text()
    assert "- (disabled)" in idle_text and not re.search(r"\d{4}-\d\d-\d\d", idle_text), idle_text

    # The website form shows its JSON whole.
    await page.goto(f"{console.base}/websites/{console.ids['website_id']}")
    box = page.locator("#website-form textarea[name=extraction]")
    assert await box.evaluate("el => el.scrollHeight <= el.clientHeight + 2")
    assert json.loads(await box.input_value())["fields"]["field_29"] == "div.card > span.value-29"
    await page.screenshot(path=str(console.shots / "website-form.png"), full_page=True)
