"""Targets (``/targets``): the list (filtered, paged; ``?format=json``), the form to add one, and a
target's page: its next runs, "why didn't it run at T?" (:func:`crawlherd.console.explain.explain`), its
lineage, and the forms to run it now, enable or disable it, change its schedule or delete it."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any
from zoneinfo import ZoneInfo

from starlette.requests import Request
from starlette.responses import Response

from crawlherd.console import editing
from crawlherd.console.browse import browse_targets, website_names
from crawlherd.console.explain import explain, lineage
from crawlherd.console.run_now import run_now
from crawlherd.console.users import Action
from crawlherd.dispatch.targets import get_target, preview_target
from crawlherd.errors import CrawlherdError
from crawlherd.web.auth import actor, checked_form
from crawlherd.web.common import (
    PAGE,
    RouteTable,
    back,
    choice_param,
    engine,
    form_errors,
    found,
    int_param,
    json_response,
    next_key,
    raw_form,
    render,
    time_param,
    ts,
    website_filter,
)
from crawlherd.web.routes.schedules import schedule_fields

__all__ = [
    "routes",
    "target_active",
    "target_create",
    "target_delete",
    "target_new",
    "target_page",
    "target_run",
    "target_schedule",
    "targets_page",
]

routes = RouteTable()


#: The targets list's state filter.
TARGET_STATES = ("active", "disabled", "due")


def _target_values(raw: dict[str, str]) -> dict[str, Any]:
    """The target form's fields as the keys of a ``[[targets]]`` entry (validated by the service)."""
    values: dict[str, Any] = {
        "website": raw.get("website", ""),
        "keywords": [k for k in (s.strip() for s in raw.get("keywords", "").split(",")) if k],
        "locations": [loc.strip() for loc in raw.get("locations", "").split(",")] or [""],
        "timezone": raw.get("timezone") or "UTC",
        "misfire": raw.get("misfire") or "skip",
        "active": raw.get("active", "on") == "on",
    }
    values.update(schedule_fields(raw))
    if raw.get("backfill_limit", "").strip():
        values["backfill_limit"] = raw["backfill_limit"].strip()
    return values


@routes.get("/targets", Action.READ)
async def targets_page(request: Request) -> Response:
    p = request.query_params
    website, names = await website_filter(request)
    now, rows = await browse_targets(
        engine(request),
        q=p.get("q", ""),
        website=website,
        state=choice_param("state", p.get("state"), TARGET_STATES),
        after_id=int_param(p.get("after")),
        limit=PAGE,
    )
    if p.get("format") == "json":
        return json_response([{**asdict(r), "due": r.due_at(now)} for r in rows])
    return render(
        request, "targets.html", rows=rows, now=now, q=p.get("q", ""), website=p.get("website", ""),
        state=p.get("state", ""), websites=names, next_after=next_key(rows), states=TARGET_STATES,
    )


@routes.get("/targets/new", Action.EDIT)
async def target_new(request: Request) -> Response:
    return render(
        request, "target_form.html", websites=await website_names(engine(request)), errors={},
        values={"timezone": "UTC", "every": "1h", "misfire": "skip"}, target=None,
    )


@routes.post("/targets", Action.EDIT)
async def target_create(request: Request) -> Response:
    raw = raw_form(await checked_form(request))
    errors = await form_errors(lambda: editing.save_target(engine(request), _target_values(raw), actor=actor(request)))
    if errors is None:
        return back("/targets", "target saved")
    return render(
        request, "target_form.html", status=400, websites=await website_names(engine(request)),
        errors=errors, values=raw, target=None,
    )


@routes.get("/targets/{target_id:int}", Action.READ)
async def target_page(request: Request) -> Response:
    db, target_id = engine(request), int(request.path_params["target_id"])
    info = await found(get_target(db, target_id))
    why = await explain(db, target_id, time_param(request.query_params.get("at")))
    trail = await lineage(db, target_id, limit=10)
    zone = ZoneInfo(info.timezone)
    runs = [(slot, run_at, run_at.astimezone(zone)) for slot, run_at in await preview_target(db, target_id, 10)]
    return render(
        request, "target.html", t=info, why=why, trail=trail, runs=runs, at=request.query_params.get("at", ""),
        run_key=uuid.uuid4().hex, flash=request.query_params.get("flash"),
    )


@routes.post("/targets/{target_id:int}/run", Action.RUN_NOW)
async def target_run(request: Request) -> Response:
    target_id = int(request.path_params["target_id"])
    form = await checked_form(request)
    key = str(form.get("key") or "") or None
    result = await run_now(engine(request), target_id, requested_by=actor(request), request_key=key)
    message = "run queued" if result.created else "a run of this target is already queued"
    return back(f"/targets/{target_id}", f"{message} (slot {ts(result.slot_at)})")


@routes.post("/targets/{target_id:int}/active", Action.PAUSE)
async def target_active(request: Request) -> Response:
    target_id = int(request.path_params["target_id"])
    active = (await checked_form(request)).get("active") == "1"
    await editing.set_target_active(engine(request), target_id, active, actor=actor(request))
    return back(f"/targets/{target_id}", "enabled" if active else "disabled")


@routes.post("/targets/{target_id:int}/delete", Action.EDIT)
async def target_delete(request: Request) -> Response:
    target_id = int(request.path_params["target_id"])
    await checked_form(request)
    await editing.delete_target(engine(request), target_id, actor=actor(request))
    return back("/targets", f"target {target_id} deleted")


@routes.post("/targets/{target_id:int}/schedule", Action.EDIT)
async def target_schedule(request: Request) -> Response:
    target_id = int(request.path_params["target_id"])
    info = await get_target(engine(request), target_id)
    values = _target_values(raw_form(await checked_form(request)))
    values.update(website=info.website, keywords=[info.keywords], locations=[info.location], active=info.active)
    try:
        await editing.save_target(engine(request), values, actor=actor(request))
    except CrawlherdError as exc:
        return back(f"/targets/{target_id}", f"schedule not saved: {exc}")
    return back(f"/targets/{target_id}", "schedule saved")
