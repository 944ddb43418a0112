"""A schedule as the target forms send it, and ``/api/schedule-preview``: the next ten runs of a schedule
being typed (the forms' live preview, ``static/console.js``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from crawlherd.console import editing
from crawlherd.console.users import Action
from crawlherd.db.engine import db_now
from crawlherd.dispatch.schedule import make_schedule, upcoming
from crawlherd.dispatch.targets_file import TargetSpec
from crawlherd.errors import CrawlherdError
from crawlherd.web.common import RouteTable, duration, engine, ts

__all__ = ["routes", "schedule_fields", "schedule_preview"]

routes = RouteTable()


def schedule_fields(form: Mapping[str, str]) -> dict[str, Any]:
    """A target form's (or query's) schedule as target-spec fields: ``cron``, else ``every``; ``jitter``."""
    values: dict[str, Any] = {}
    if form.get("cron", "").strip():
        values["cron"] = form["cron"].strip()
    else:
        values["every"] = duration(form.get("every", "").strip()) or None
    if form.get("jitter", "").strip():
        values["jitter"] = duration(form["jitter"].strip())
    return values


@routes.get("/api/schedule-preview", Action.READ)
async def schedule_preview(request: Request) -> Response:
    p = request.query_params
    values: dict[str, Any] = {"website": "preview", "keywords": ["preview"], "timezone": p.get("timezone") or "UTC"}
    values.update(schedule_fields(p))
    try:
        spec = TargetSpec.model_validate(values)
        schedule = make_schedule(**spec.schedule_fields())
    except ValidationError as exc:
        return JSONResponse({"ok": False, "errors": editing._problems(exc)})  # noqa: SLF001
    except CrawlherdError as exc:
        return JSONResponse({"ok": False, "errors": {"schedule": str(exc)}})
    async with engine(request).connect() as conn:
        now = await db_now(conn)
    zone = ZoneInfo(spec.timezone)
    runs = [
        {"utc": ts(s), "local": s.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")}
        for s in upcoming(schedule, after=now, count=10)
    ]
    return JSONResponse({"ok": True, "timezone": spec.timezone, "jitter_seconds": spec.jitter, "runs": runs})
