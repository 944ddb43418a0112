"""Dead letters (``/dead-letters``): the jobs every attempt of which failed; sending them again (some or
all) and discarding one with a reason, both written to the audit trail."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from crawlherd.console.dead_letters import discard, list_dead_letters, retry_dead
from crawlherd.console.users import Action
from crawlherd.errors import CrawlherdError
from crawlherd.web.auth import actor, checked_form
from crawlherd.web.common import RouteTable, back, engine, render, website_filter

__all__ = ["dead_discard", "dead_page", "dead_retry", "routes"]

routes = RouteTable()


@routes.get("/dead-letters", Action.READ)
async def dead_page(request: Request) -> Response:
    website, _names = await website_filter(request)
    rows = await list_dead_letters(engine(request), website=website)
    return render(request, "dead_letters.html", rows=rows, flash=request.query_params.get("flash"))


@routes.post("/dead-letters/retry", Action.RETRY)
async def dead_retry(request: Request) -> Response:
    form = await checked_form(request)
    ids = None if form.get("all") == "1" else [int(str(v)) for v in form.getlist("run_id")]
    sent = await retry_dead(engine(request), ids, actor=actor(request))
    return back("/dead-letters", f"{sent} job(s) sent again")


@routes.post("/dead-letters/{run_id:int}/discard", Action.DISCARD)
async def dead_discard(request: Request) -> Response:
    run_id = int(request.path_params["run_id"])
    form = await checked_form(request)
    try:
        await discard(engine(request), run_id, reason=str(form.get("reason", "")), actor=actor(request))
    except CrawlherdError as exc:
        return back("/dead-letters", f"not discarded: {exc}")
    return back("/dead-letters", f"run {run_id} discarded")
