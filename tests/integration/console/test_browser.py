"""The console in a real headless Chromium (Playwright driving the system Chromium), with the whole
pipeline running (dispatcher, relay, worker) against the demo site: log in; create a website and a
target; see the next-runs preview; Run now and watch the job succeed; a failing site's job ends dead
and is retried from the Dead letters page; items exported; a keyword with a script tag stays text.

Screenshots of every page go to ``$CRAWLHERD_CONSOLE_SCREENSHOTS`` when set (``docs/console`` makes
the ones in docs/console.md), else to a temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from crawlherd import DemoSite
from crawlherd.brokers import open_broker
from crawlherd.console.users import add_user
from crawlherd.db import create_engine, upgrade
from crawlherd.dispatch.embedded import run_embedded
from crawlherd.fetch.base import FetchLimits
from crawlherd.web.server import serve_console
from crawlherd.worker.worker import Worker, WorkerOptions
from tests.support.console import CARD_RULES

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

playwright_api = pytest.importorskip("playwright.async_api")


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("CRAWLHERD_CONSOLE_SCREENSHOTS") or tmp_path / "shots")
    where.mkdir(parents=True, exist_ok=True)
    return where


@contextlib.asynccontextmanager
async def platform(url: str) -> AsyncIterator[tuple[str, DemoSite]]:
    """Demo site + console + dispatcher/relay/worker, all on loopback, until the block exits."""
    engine = create_engine(url)
    stop = asyncio.Event()
    try:
        async with DemoSite(seed=11, throttle_every=0) as site, open_broker(url) as broker:
            worker = Worker(
                engine,
                broker,
                WorkerOptions(
                    limits=FetchLimits(allow_private_addresses=True),
                    max_attempts=2,
                    backoff=0.0,
                    max_backoff=0.0,
                    shutdown_timeout=1.0,
                ),
            )
            async with worker, serve_console(engine, port=0) as console:
                pipeline = asyncio.create_task(run_embedded(engine, broker, worker, stop=stop, interval=0.5))
                try:
                    yield console.url.rstrip("/"), site
                finally:
                    stop.set()
                    await pipeline
    finally:
        await engine.dispose()


async def wait_for_text(page: Any, url: str, selector: str, text: str, *, tries: int = 150) -> None:
    """Reload ``url`` until ``selector`` shows ``text`` (the pipeline runs in the background)."""
    shown: list[str] = []
    for _ in range(tries):
        await page.goto(url)
        shown = await page.locator(selector).all_inner_texts()  # no waiting: the selector may match nothing yet
        if any(text in s for s in shown):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {selector} of {url}: {shown} {await page.content()}")


@pytest.mark.slow
async def test_the_console_end_to_end(tmp_path: Path, shared_chromium: str, shots: Path) -> None:
    url = f"sqlite:///{tmp_path}/config.db"
    await upgrade(url)
    setup = create_engine(url)
    await add_user(setup, "ops", "correct horse battery")
    await setup.dispose()
    dialogs: list[str] = []
    async with platform(url) as (base, site), playwright_api.async_playwright() as pw:
        browser = await pw.chromium.connect_over_cdp(shared_chromium)  # the test process's (tests/support)
        page = await (
            await browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
        ).new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), asyncio.ensure_future(d.dismiss())))

        # Log in (a wrong password first).
        await page.goto(base + "/")
        assert "/login" in page.url
        await page.fill("input[name=name]", "ops")
        await page.fill("input[name=password]", "not the password")
        await page.click("button[type=submit]")
        assert await page.inner_text("#login-error") == "wrong name or password"
        await page.screenshot(path=str(shots / "login.png"))
        await page.fill("input[name=name]", "ops")
        await page.fill("input[name=password]", "correct horse battery")
        await page.click("button[type=submit]")
        await page.wait_for_selector("#live")

        # A website and a target, through the forms.
        await page.goto(base + "/websites")
        await page.click("#new-website")
        await page.fill("#website-form input[name=name]", "demo")
        await page.fill("#website-form input[name=base_url]", site.url)
        await page.fill("#website-form input[name=search_url_template]", site.url + "/search?q={keywords}&l={location}")
        await page.select_option("#website-form select[name=pagination_type]", "page_param")
        await page.fill("#website-form input[name=pagination_max_pages]", "2")
        await page.fill("#website-form textarea[name=extraction]", json.dumps(CARD_RULES))
        await page.fill("#website-form input[name=min_delay]", "0")
        await page.screenshot(path=str(shots / "website-new.png"), full_page=True)
        await page.click("#website-form button[type=submit]")
        assert "website demo saved" in await page.inner_text("#flash")
        await page.screenshot(path=str(shots / "websites.png"), full_page=True)

        await page.goto(base + "/targets/new")
        await page.select_option("#target-form select[name=website]", "demo")
        await page.fill("#target-form input[name=keywords]", "python")
        await page.fill("#target-form input[name=locations]", "berlin")
        await page.fill("#target-form input[name=every]", "")
        await page.fill("#target-form input[name=cron]", "0 7 * * 1-5")
        await page.fill("#target-form input[name=timezone]", "Europe/Berlin")
        await page.wait_for_function(  # a function, not an expression: the page's CSP forbids eval
            "() => [...document.querySelectorAll('table.schedule-preview td:nth-child(2)')]"
            ".filter(td => td.textContent.includes(' 07:00:00 ')).length === 10"
        )
        local_times = await page.locator("table.schedule-preview tr td:nth-child(2)").all_inner_texts()
        assert len(local_times) == 10 and all(" 07:00:00 " in t for t in local_times)
        await page.fill("#target-form input[name=cron]", "0 7 * * 1-9")  # invalid: the preview says so at once
        await page.wait_for_selector("ul.schedule-errors")
        await page.screenshot(path=str(shots / "target-form-error.png"))
        await page.fill("#target-form input[name=cron]", "0 7 * * 1-5")
        await page.wait_for_selector("table.schedule-preview")
        await page.screenshot(path=str(shots / "target-form.png"), full_page=True)
        await page.click("#target-form button[type=submit]")
        assert "target saved" in await page.inner_text("#flash")
        await page.screenshot(path=str(shots / "targets.png"), full_page=True)

        # Run now -- a double click -- and watch one job succeed.
        await page.click("#targets a[href^='/targets/']")
        target_url = page.url
        await page.dblclick("#run-now button")
        await page.wait_for_selector("#flash")
        assert "queued" in await page.inner_text("#flash")
        await wait_for_text(page, base + "/jobs", "#jobs", "succeeded")
        rows = await page.locator("#jobs tr").count()
        assert rows == 2  # the header and one job: exactly once
        await page.screenshot(path=str(shots / "jobs.png"), full_page=True)
        await page.click("#jobs a[href^='/jobs/']")
        assert "succeeded" in await page.inner_text("#attempts")
        await page.screenshot(path=str(shots / "job.png"), full_page=True)
        await page.goto(target_url)
        assert await page.get_attribute("#verdict", "data-verdict") == "ran"
        await page.screenshot(path=str(shots / "target.png"), full_page=True)

        # A failing site, imported as a file; its job dies and is retried from the Dead letters page.
        await page.goto(base + "/targets/import")
        toml = "\n".join(
            [
                "[[websites]]",
                'name = "broken"',
                f'base_url = "{site.url}"',
                f'search_url_template = "{site.url}/fail/search?q={{keywords}}&l={{location}}"',
                "[websites.politeness]",
                "min_delay = 0",
                "[websites.extraction]",
                'item_selector = "article.job-card"',
                "[websites.extraction.fields]",
                'title = "h2.title"',
                "",
                "[[targets]]",
                'website = "broken"',
                'keywords = ["python"]',
                'every = "1d"',
            ]
        )
        await page.fill("textarea[name=text]", toml)
        await page.click("form.card button[type=submit]")
        assert "targets 1 new" in await page.inner_text("#import-result")
        await page.goto(base + "/targets?website=broken")
        await page.click("#targets a[href^='/targets/']")
        await page.click("#run-now button")
        await wait_for_text(page, base + "/dead-letters", "#dead-letters", "HTTP 500")
        await page.screenshot(path=str(shots / "dead-letters.png"), full_page=True)
        await page.click("#dead-letters button.retry")
        assert "1 job(s) sent again" in await page.inner_text("#flash")
        await wait_for_text(page, base + "/audit", "#audit", "deadletter.retry")
        await wait_for_text(page, base + "/jobs?website=broken", "#jobs", "dead")  # it fails again, honestly

        # The failing website is edited, its targets disabled and enabled, and it is deleted.
        await page.goto(base + "/websites")
        await page.click("#websites a:text-is('broken')")
        website_url = page.url
        await page.fill("#website-form input[name=max_concurrency]", "3")
        await page.fill("#website-form input[name=revisit_age]", "12h")
        await page.click("#website-form button[type=submit]")
        assert "website saved" in await page.inner_text("#flash")
        assert await page.input_value("#website-form input[name=max_concurrency]") == "3"
        assert await page.input_value("#website-form input[name=revisit_age]") == "12h"
        await page.click("#website-disable button")
        assert "1 target(s) disabled" in await page.inner_text("#flash")
        assert "0 active" in await page.inner_text("#usage")
        await page.click("#website-enable button")
        assert "1 target(s) enabled" in await page.inner_text("#flash")
        await page.screenshot(path=str(shots / "website.png"), full_page=True)
        await page.fill("#website-delete input[name=confirm]", "not-it")
        await page.click("#website-delete button")
        assert "not deleted" in await page.inner_text("#flash") and page.url.startswith(website_url)
        await page.fill("#website-delete input[name=confirm]", "broken")
        await page.click("#website-delete button")
        assert "website broken deleted with its 1 target(s)" in await page.inner_text("#flash")
        assert "broken" not in await page.inner_text("#websites")

        await page.goto(base + "/audit")
        for action in ("website.update", "website.disable", "website.enable", "website.delete"):
            assert action in await page.inner_text("#audit")
        await page.screenshot(path=str(shots / "audit.png"), full_page=True)

        # Items, and their export.
        await page.goto(base + "/items")
        assert await page.locator("#items tr").count() > 5
        await page.screenshot(path=str(shots / "items.png"), full_page=True)
        async with page.expect_download() as download_info:
            await page.click("#export-csv")
        saved = await (await download_info.value).path()
        exported = (await asyncio.to_thread(Path(saved).read_text, encoding="utf-8")).splitlines()
        assert exported[0].startswith("website,url") and len(exported) == await page.locator("#items tr").count()

        # A keyword with a script tag is shown as text: no dialog opens.
        await page.goto(base + "/targets/new")
        await page.select_option("#target-form select[name=website]", "demo")
        await page.fill("#target-form input[name=keywords]", "<script>alert(1)</script>")
        await page.click("#target-form button[type=submit]")
        await page.goto(base + "/targets?q=script")
        assert "<script>alert(1)</script>" in await page.inner_text("#targets")
        await page.click("#targets a[href^='/targets/']")
        await page.goto(base + "/jobs")
        assert dialogs == []

        await page.goto(base + "/")
        await page.wait_for_selector("#processes")
        assert "worker" in await page.inner_text("#processes")
        await page.screenshot(path=str(shots / "overview.png"), full_page=True)

        # Politeness holding a job: the demo website now asks 30 s between fetches; its next run's
        # second page and detail pages wait in the frontier -- the Frontier page and the verdict say so.
        await page.goto(base + "/websites")
        await page.click("#websites a:text-is('demo')")
        await page.fill("#website-form input[name=min_delay]", "30s")
        await page.click("#website-form button[type=submit]")
        assert "website saved" in await page.inner_text("#flash")
        await page.goto(target_url)
        await page.click("#run-now button")
        await wait_for_text(page, base + "/frontier", "table.frontier td.state", "held")
        assert "30s" in await page.inner_text("table.frontier")
        await page.screenshot(path=str(shots / "frontier.png"), full_page=True)
        await wait_for_text(page, target_url, "#verdict", "held by the website's politeness")
        assert await page.get_attribute("#verdict", "data-verdict") == "politeness"
        await page.screenshot(path=str(shots / "target-politeness.png"), full_page=True)
        await browser.close()
