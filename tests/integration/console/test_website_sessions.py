"""The website page and its fetch profile (issue 21): the sessions and proxies the workers report, the
profile shown read-only with proxy credentials hidden, and kept when the form is saved."""

from __future__ import annotations

import html
import re
import time

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.db.heartbeat import Heartbeat
from crawlherd.db.models import Website
from tests.integration.console.conftest import Browser
from tests.support.db import add_website

FETCH = {
    "user_agent": "Mozilla/5.0 t",
    "proxies": [["http://alice:pw-in-the-url@10.0.0.7:3128"], ["socks5://bob:{env:SOCKS_PW}@10.0.0.8:1080"]],
    "login": {"url": "https://jobs.example.com/login", "secrets": {"password": "env:JOBS_PW"}},
}


async def test_the_website_page_shows_sessions_and_keeps_the_profile(engine: AsyncEngine, browser: Browser) -> None:
    await add_website(engine, "site", fetch=FETCH)
    empty = (await browser.get("/websites/1")).text
    assert "No worker has fetched this website under sessions" in empty
    now = time.time()
    report = {"site": {
        "tier": 1,
        "proxies": {"http://alice:***@10.0.0.7:3128": {"requests": 40, "blocks": 3, "successes": 37,
                                                         "rest_until": now + 3600},
                    "socks5://bob:***@10.0.0.8:1080": {"requests": 5, "blocks": 0, "successes": 5, "rest_until": 0}},
        "sessions": [{"id": "ab12cd34", "proxy": "socks5://bob:***@10.0.0.8:1080", "uses": 5, "errors": 0,
                      "age": 12.0, "logged_in": True, "retired": None},
                     {"id": "ef56ab78", "proxy": "http://alice:***@10.0.0.7:3128", "uses": 14, "errors": 0,
                      "age": 80.0, "logged_in": True, "retired": "blocked: HTTP 403"}],
    }}
    await Heartbeat(engine, kind="worker", name="w1", interval=3600, info={"sessions": report}).register()
    page = (await browser.get("/websites/1")).text
    assert "Tier <b>1</b> · 1 live session(s)" in page
    rows = re.findall(r"<tr><td class=\"mono\">([^<]+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>([^<]+)</td>",
                      page)
    assert [(r[0], r[1], r[2]) for r in rows] == [("http://alice:***@10.0.0.7:3128", "40", "3"),
                                                  ("socks5://bob:***@10.0.0.8:1080", "5", "0")]
    assert rows[0][4].endswith("UTC") and rows[1][4] == "—"  # the first rests, the second does not
    assert "retired: blocked: HTTP 403" in page
    assert "pw-in-the-url" not in page  # the profile is shown with the proxy's password hidden
    profile = re.search(r'id="website-fetch">([^<]*)</textarea>', page)
    assert profile and "alice:***@10.0.0.7" in html.unescape(profile.group(1))

    shown = dict(re.findall(r'<input name="([a-z_]+)" value="([^"]*)"', page))
    extraction = re.search(r'<textarea name="extraction"[^>]*>([^<]*)</textarea>', page)
    assert extraction
    form = {**{k: html.unescape(v) for k, v in shown.items()}, "extraction": html.unescape(extraction.group(1)),
            "pagination_type": "page_param", "robots": "obey", "max_concurrency": "3"}
    saved = await browser.post("/websites/1", form, page="/websites/1")
    assert saved.status_code == 303, saved.text
    async with engine.connect() as conn:
        spec = (await conn.execute(select(Website.spec))).scalar_one()
    assert spec["politeness"]["max_concurrency"] == 3
    assert spec["fetch"]["proxies"] == FETCH["proxies"]  # kept, password and all, as the targets file gave it
    assert spec["fetch"]["login"]["secrets"] == {"password": "env:JOBS_PW"}
