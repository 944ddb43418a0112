"""A hostile listing page (150,000 nested ``<div>``s) fails its own job with the reason, in bounded
time, while a good job of the same website is done (issue 11, point 9)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.test_worker import items, load, run_until_idle, runs  # noqa: F401
from tests.support.httpserver import serve

HOSTILE = "<html><body>" + "<div>" * 150_000 + "</div>" * 150_000 + "</body></html>"


@pytest.fixture
async def hostile_board() -> AsyncIterator[str]:
    async def search(request: web.Request) -> web.Response:
        if request.query.get("q") == "evil":
            return web.Response(text=HOSTILE, content_type="text/html")
        cards = "".join(f'<article><a href="/jobs/{n}">job {n}</a></article>' for n in range(3))
        return web.Response(text=f"<html><body>{cards}</body></html>", content_type="text/html")

    async def job(request: web.Request) -> web.Response:
        return web.Response(text="<p class='salary'>1</p>", content_type="text/html")

    async def robots(request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/search", search)
    app.router.add_get("/jobs/{n}", job)
    app.router.add_get("/robots.txt", robots)
    async with serve(app) as served:
        yield served.url


@pytest.mark.timeout(120)
async def test_a_hostile_listing_page_fails_its_job_and_the_good_one_is_done(
    engine: AsyncEngine,  # noqa: F811
    hostile_board: str,
    tmp_path: Path,
) -> None:
    site = {
        "name": "board",
        "base_url": hostile_board,
        "search_url_template": f"{hostile_board}/search?q={{keywords}}",
        "extraction": {"item_selector": "article", "item_url": "a@href", "fields": {"title": "a"}},
        "politeness": {"min_delay": 0, "max_concurrency": 4, "robots": "obey"},
    }
    await load(engine, tmp_path, site, ["evil", "good"], due=True)
    await run_until_idle(engine, tmp_path, max_attempts=1)
    outcome = await runs(engine)
    assert sorted(status for status, _, _ in outcome) == ["dead", "succeeded"]
    error = next(err for status, _, err in outcome if status == "dead")
    assert error is not None and "nests elements more than 1024 deep" in error
    assert sorted(await items(engine)) == [f"{hostile_board}/jobs/{n}" for n in range(3)]
