"""``crawlherd web``: the operator's console, a server-rendered ASGI application on the config DB.

:func:`create_app` builds it (Starlette + Jinja2, templates in ``templates/``, a little JavaScript in
``static/console.js`` for the live overview and the schedule preview). Every page reads the same
functions the CLI calls (:mod:`crawlherd.console.overview`, ``.jobs``, ``.explain``, ``.run_now`` ...);
every change goes through :mod:`crawlherd.console.editing`, ``.run_now`` or ``.dead_letters`` and is
written to the audit trail. Secrets in URLs are redacted before anything is rendered.
"""

from __future__ import annotations

import io
import json
import secrets
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from crawlherd._redact import redact_url
from crawlherd.console import editing
from crawlherd.console.audit import list_audit
from crawlherd.console.browse import (
    WebsiteUsage,
    browse_items,
    browse_targets,
    get_website,
    list_websites,
    website_names,
)
from crawlherd.console.dead_letters import discard, list_dead_letters, retry_dead
from crawlherd.console.explain import explain, lineage
from crawlherd.console.jobs import JOB_STATUSES, JobFilter, get_job, list_jobs
from crawlherd.console.overview import overview
from crawlherd.console.run_now import run_now
from crawlherd.console.users import authenticate
from crawlherd.db.engine import db_now
from crawlherd.db.heartbeat import ProcessInfo
from crawlherd.dispatch.schedule import make_schedule, upcoming
from crawlherd.dispatch.targets import get_target, preview_target
from crawlherd.dispatch.targets_file import TargetSpec
from crawlherd.duration import format_duration
from crawlherd.errors import CrawlherdError, TargetsFileError
from crawlherd.frontier.base import HostState
from crawlherd.sinks.export import FORMATS, export_items
from crawlherd.sitespec import SiteSpec
from crawlherd.web.auth import LoginRequired, actor, checked_form, csrf_token

__all__ = ["create_app"]

_HERE = files("crawlherd.web")
PAGE = 50

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
_T = TypeVar("_T")


def _ts(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def _templates() -> Jinja2Templates:
    env = Environment(
        loader=FileSystemLoader(str(_HERE.joinpath("templates"))),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["ts"] = _ts
    env.filters["age"] = _age
    env.filters["redact"] = lambda v: redact_url(str(v)) if v is not None else ""
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    return Jinja2Templates(env=env)


def _schedule_fields(form: Mapping[str, str]) -> dict[str, Any]:
    """A target form's (or query's) schedule as target-spec fields: ``cron``, else ``every``; ``jitter``."""
    values: dict[str, Any] = {}
    if form.get("cron", "").strip():
        values["cron"] = form["cron"].strip()
    else:
        values["every"] = _duration(form.get("every", "").strip()) or None
    if form.get("jitter", "").strip():
        values["jitter"] = _duration(form["jitter"].strip())
    return values


def _duration(value: str) -> str | float:
    """A form's duration: a bare number is seconds, anything else ("15m", "1h30m") is parsed later."""
    try:
        return float(value)
    except ValueError:
        return value


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        raise HTTPException(400, f"not a number: {value!r}") from None


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, f"not a time: {value!r} (use 2026-01-31T07:00 or with +01:00)") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


async def _found(lookup: Awaitable[_T]) -> _T:
    """What ``lookup`` finds; a 404 when it finds nothing (it raised CrawlherdError)."""
    try:
        return await lookup
    except CrawlherdError as exc:
        raise HTTPException(404, str(exc)) from None


def _raw_form(form: Any) -> dict[str, str]:
    """A posted form's fields (but its CSRF token) as text."""
    return {k: str(v) for k, v in form.items() if k != "csrf"}


#: The website form's fields that are shown with their secrets redacted.
_REDACTED_FIELDS = ("base_url", "search_url_template", "extraction", "metadata")


def _json_text(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) if value else ""


def _website_form(site: SiteSpec | None) -> dict[str, str]:
    """The website form's fields for ``site`` (None: a new website's defaults); secrets redacted."""
    site = site or SiteSpec.model_construct(name="", base_url="", search_url_template="")
    p, pol = site.pagination, site.politeness
    return {
        "name": site.name,
        "base_url": redact_url(site.base_url),
        "search_url_template": redact_url(site.search_url_template),
        "requires_playwright": "on" if site.requires_playwright else "",
        "pagination_type": p.type,
        "pagination_selector": p.selector or "",
        "pagination_param": p.param,
        "pagination_start": str(p.start),
        "pagination_step": str(p.step),
        "pagination_max_pages": str(p.max_pages),
        "extraction": redact_url(_json_text(site.extraction)),
        "min_delay": format_duration(pol.min_delay) if pol.min_delay else "0s",
        "max_concurrency": str(pol.max_concurrency),
        "robots": pol.robots,
        "revisit_age": format_duration(site.revisit_age),
        "metadata": redact_url(_json_text(site.metadata)),
    }


def _website_values(raw: dict[str, str]) -> dict[str, Any]:
    """The website form's fields as the keys of a ``[[websites]]`` entry (validated by the service)."""

    def text(key: str) -> str:
        return raw.get(key, "").strip()

    pagination: dict[str, Any] = {"type": text("pagination_type") or "none"}
    for key in ("selector", "param", "start", "step", "max_pages"):
        if text(f"pagination_{key}"):
            pagination[key] = text(f"pagination_{key}")
    values: dict[str, Any] = {
        "name": text("name"),
        "base_url": text("base_url"),
        "search_url_template": text("search_url_template"),
        "requires_playwright": raw.get("requires_playwright") == "on",
        "pagination": pagination,
        "politeness": {
            "min_delay": _duration(text("min_delay") or "1s"),
            "max_concurrency": text("max_concurrency") or 2,
            "robots": text("robots") or "obey",
        },
        "revisit_age": _duration(text("revisit_age") or "1d"),
    }
    for key in ("extraction", "metadata"):
        if text(key):
            try:
                values[key] = json.loads(text(key))
            except json.JSONDecodeError as exc:
                raise editing.FormError({key: f"not valid JSON: {exc}"}) from None
    return values


def create_app(engine: AsyncEngine, *, secret_key: str | None = None, title: str = "crawlherd") -> Starlette:
    """The console on ``engine`` (the caller's). ``secret_key`` signs the session cookies (default: a
    random key made now, so sessions end when the process does)."""
    templates = _templates()

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.update(
            request=request,
            csrf=csrf_token(request),
            user=actor(request),
            open_mode=getattr(request.state, "open_mode", False),
            title=title,
        )
        return templates.TemplateResponse(request, name, context, status_code=status)

    def back(url: str, message: str | None = None) -> RedirectResponse:
        if message:
            sep = "&" if "?" in url else "?"
            url = f"{url}{sep}flash={message}"
        return RedirectResponse(url, status_code=303)

    # -- login ------------------------------------------------------------------------------------

    async def login_page(request: Request) -> Response:
        return render(request, "login.html", next=request.query_params.get("next", "/"), error=None)

    async def login(request: Request) -> Response:
        form = await checked_form(request)
        name, password = str(form.get("name", "")), str(form.get("password", ""))
        target = str(form.get("next", "/"))
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        if not await authenticate(engine, name, password):
            return render(request, "login.html", status=401, next=target, error="wrong name or password")
        request.session.clear()
        request.session["user"] = name
        request.session["csrf"] = secrets.token_urlsafe(32)
        return RedirectResponse(target, status_code=303)

    async def logout(request: Request) -> Response:
        await checked_form(request)
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    # -- overview ---------------------------------------------------------------------------------

    async def overview_page(request: Request) -> Response:
        return render(request, "overview.html", o=await overview(engine))

    async def overview_live(request: Request) -> Response:
        return render(request, "_overview_live.html", o=await overview(engine))

    async def overview_json(request: Request) -> Response:
        return JSONResponse((await overview(engine)).as_dict())

    # -- websites ---------------------------------------------------------------------------------

    async def websites_page(request: Request) -> Response:
        return render(request, "websites.html", websites=await list_websites(engine))

    def website_form(
        request: Request, *, values: dict[str, str], errors: dict[str, str], usage: WebsiteUsage | None = None,
        status: int = 200,
    ) -> Response:
        return render(request, "website_form.html", status=status, values=values, errors=errors, usage=usage)

    async def website_new(request: Request) -> Response:
        return website_form(request, values=_website_form(None), errors={})

    async def website_create(request: Request) -> Response:
        raw = _raw_form(await checked_form(request))
        try:
            await editing.save_website(engine, _website_values(raw), actor=actor(request))
        except editing.FormError as exc:
            errors = exc.problems
        except CrawlherdError as exc:
            errors = {"form": str(exc)}
        else:
            return back("/websites", f"website {raw.get('name', '')} saved")
        raw.update(base_url="", search_url_template="")  # a URL may hold a secret: typed again, never echoed
        return website_form(request, values=raw, errors=errors, status=400)

    async def website_page(request: Request) -> Response:
        site, usage = await _website(request)
        return website_form(request, values=_website_form(site), errors={}, usage=usage)

    async def website_update(request: Request) -> Response:
        site, usage = await _website(request)
        raw = _raw_form(await checked_form(request))
        shown, stored = _website_form(site), site.model_dump(mode="json")
        # a field sent back as it was shown (its secrets redacted) keeps its stored value
        kept = [k for k in _REDACTED_FIELDS if raw.get(k, "").strip() == shown[k].strip()]
        try:
            values = _website_values({**raw, **dict.fromkeys(kept, "")})
            values.update({k: stored[k] for k in kept})
            await editing.update_website(engine, usage.id, values, actor=actor(request))
        except editing.FormError as exc:
            errors = exc.problems
        except CrawlherdError as exc:
            errors = {"form": str(exc)}
        else:
            return back(f"/websites/{usage.id}", "website saved")
        values = {**raw, **{k: redact_url(raw.get(k, "")) for k in _REDACTED_FIELDS}}
        return website_form(request, values=values, errors=errors, usage=usage, status=400)

    async def website_active(request: Request) -> Response:
        _site, usage = await _website(request)
        active = (await checked_form(request)).get("active") == "1"
        changed = await editing.set_website_active(engine, usage.id, active, actor=actor(request))
        return back(f"/websites/{usage.id}", f"{changed} target(s) {'enabled' if active else 'disabled'}")

    async def website_delete(request: Request) -> Response:
        _site, usage = await _website(request)
        form = await checked_form(request)
        try:
            confirm = str(form.get("confirm", ""))
            gone = await editing.delete_website(engine, usage.id, confirm=confirm, actor=actor(request))
        except editing.FormError as exc:
            return back(f"/websites/{usage.id}", f"not deleted: {exc.problems['confirm']}")
        return back(
            "/websites", f"website {gone.name} deleted with its {gone.targets} target(s), {gone.runs} job run(s) "
            f"and {gone.items} item(s)",
        )

    async def _website(request: Request) -> tuple[SiteSpec, WebsiteUsage]:
        return await _found(get_website(engine, request.path_params["website_id"]))

    # -- targets ----------------------------------------------------------------------------------

    async def targets_page(request: Request) -> Response:
        p = request.query_params
        now, rows = await browse_targets(
            engine,
            q=p.get("q", ""),
            website=p.get("website") or None,
            state=p.get("state") or None,
            after_id=_int(p.get("after")),
            limit=PAGE,
        )
        if p.get("format") == "json":
            return _json([{**asdict(r), "due": r.due_at(now)} for r in rows])
        return render(
            request, "targets.html", rows=rows, now=now, q=p.get("q", ""), website=p.get("website", ""),
            state=p.get("state", ""), websites=await website_names(engine),
            next_after=rows[-1].id if len(rows) == PAGE else None,
        )

    async def target_new(request: Request) -> Response:
        return render(
            request, "target_form.html", websites=await website_names(engine), errors={},
            values={"timezone": "UTC", "every": "1h", "misfire": "skip"}, target=None,
        )

    def _target_values(form: Any) -> tuple[dict[str, Any], dict[str, str]]:
        raw = {k: str(v) for k, v in form.items() if k != "csrf"}
        values: dict[str, Any] = {
            "website": raw.get("website", ""),
            "keywords": [k for k in (s.strip() for s in raw.get("keywords", "").split(",")) if k],
            "locations": [loc.strip() for loc in raw.get("locations", "").split(",")] or [""],
            "timezone": raw.get("timezone") or "UTC",
            "misfire": raw.get("misfire") or "skip",
            "active": raw.get("active", "on") == "on",
        }
        values.update(_schedule_fields(raw))
        if raw.get("backfill_limit", "").strip():
            values["backfill_limit"] = raw["backfill_limit"].strip()
        return values, raw

    async def target_create(request: Request) -> Response:
        values, raw = _target_values(await checked_form(request))
        try:
            await editing.save_target(engine, values, actor=actor(request))
        except editing.FormError as exc:
            errors = exc.problems
        except CrawlherdError as exc:
            errors = {"form": str(exc)}
        else:
            return back("/targets", "target saved")
        return render(
            request, "target_form.html", status=400, websites=await website_names(engine),
            errors=errors, values=raw, target=None,
        )

    async def target_page(request: Request) -> Response:
        target_id: int = request.path_params["target_id"]
        info = await _found(get_target(engine, target_id))
        at = _time(request.query_params.get("at"))
        why = await explain(engine, target_id, at)
        trail = await lineage(engine, target_id, limit=10)
        zone = ZoneInfo(info.timezone)
        runs = [(slot, run_at, run_at.astimezone(zone)) for slot, run_at in await preview_target(engine, target_id, 10)]
        return render(
            request, "target.html", t=info, why=why, trail=trail, runs=runs, at=request.query_params.get("at", ""),
            run_key=uuid.uuid4().hex, flash=request.query_params.get("flash"),
        )

    async def target_run(request: Request) -> Response:
        target_id: int = request.path_params["target_id"]
        form = await checked_form(request)
        key = str(form.get("key") or "") or None
        result = await run_now(engine, target_id, requested_by=actor(request), request_key=key)
        message = "run queued" if result.created else "a run of this target is already queued"
        return back(f"/targets/{target_id}", f"{message} (slot {_ts(result.slot_at)})")

    async def target_active(request: Request) -> Response:
        target_id: int = request.path_params["target_id"]
        form = await checked_form(request)
        active = form.get("active") == "1"
        await editing.set_target_active(engine, target_id, active, actor=actor(request))
        return back(f"/targets/{target_id}", "enabled" if active else "disabled")

    async def target_delete(request: Request) -> Response:
        target_id: int = request.path_params["target_id"]
        await checked_form(request)
        await editing.delete_target(engine, target_id, actor=actor(request))
        return back("/targets", f"target {target_id} deleted")

    async def target_schedule(request: Request) -> Response:
        target_id: int = request.path_params["target_id"]
        info = await get_target(engine, target_id)
        form = await checked_form(request)
        values, _raw = _target_values(form)
        values.update(website=info.website, keywords=[info.keywords], locations=[info.location], active=info.active)
        try:
            await editing.save_target(engine, values, actor=actor(request))
        except CrawlherdError as exc:
            return back(f"/targets/{target_id}", f"schedule not saved: {exc}")
        return back(f"/targets/{target_id}", "schedule saved")

    async def import_page(request: Request) -> Response:
        return render(request, "import.html", errors=[], text="", result=None)

    async def import_post(request: Request) -> Response:
        form = await checked_form(request)
        try:
            upload = form.get("file")
            if upload is not None and not isinstance(upload, str) and upload.filename:
                filename = upload.filename
                text = (await upload.read()).decode("utf-8", errors="replace")
            else:
                text = str(form.get("text", ""))
                filename = "pasted." + ("yaml" if form.get("format") == "yaml" else "toml")
        finally:
            await form.close()
        try:
            result = await editing.import_text(engine, text, filename=filename, actor=actor(request))
        except TargetsFileError as exc:
            return render(request, "import.html", status=400, errors=exc.problems, text=text, result=None)
        except CrawlherdError as exc:
            return render(request, "import.html", status=400, errors=[("(file)", str(exc))], text=text, result=None)
        return render(request, "import.html", errors=[], text="", result=result)

    async def schedule_preview(request: Request) -> Response:
        p = request.query_params
        values: dict[str, Any] = {"website": "preview", "keywords": ["preview"], "timezone": p.get("timezone") or "UTC"}
        values.update(_schedule_fields(p))
        try:
            spec = TargetSpec.model_validate(values)
            schedule = make_schedule(**spec.schedule_fields())
        except ValidationError as exc:
            return JSONResponse({"ok": False, "errors": editing._problems(exc)})  # noqa: SLF001
        except CrawlherdError as exc:
            return JSONResponse({"ok": False, "errors": {"schedule": str(exc)}})
        async with engine.connect() as conn:
            now = await db_now(conn)
        zone = ZoneInfo(spec.timezone)
        runs = [
            {"utc": _ts(s), "local": s.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")}
            for s in upcoming(schedule, after=now, count=10)
        ]
        return JSONResponse({"ok": True, "timezone": spec.timezone, "jitter_seconds": spec.jitter, "runs": runs})

    # -- jobs -------------------------------------------------------------------------------------

    async def jobs_page(request: Request) -> Response:
        p = request.query_params
        status = p.get("status") or None
        if status is not None and status not in JOB_STATUSES:
            raise HTTPException(400, f"unknown status {status!r}")
        flt = JobFilter(
            status=status,
            website=p.get("website") or None,
            target_id=_int(p.get("target")),
            since=_time(p.get("since")),
            until=_time(p.get("until")),
            before_id=_int(p.get("before")),
            limit=PAGE,
        )
        rows = await list_jobs(engine, flt)
        if p.get("format") == "json":
            return JSONResponse([r.as_dict() for r in rows])
        return render(
            request, "jobs.html", rows=rows, f=flt, statuses=JOB_STATUSES, params=dict(p),
            websites=await website_names(engine),
            next_before=rows[-1].id if len(rows) == PAGE else None,
        )

    async def job_page(request: Request) -> Response:
        run_id: int = request.path_params["run_id"]
        job = await _found(get_job(engine, run_id))
        return render(request, "job.html", job=job)

    # -- dead letters -----------------------------------------------------------------------------

    async def dead_page(request: Request) -> Response:
        rows = await list_dead_letters(engine, website=request.query_params.get("website") or None)
        return render(request, "dead_letters.html", rows=rows, flash=request.query_params.get("flash"))

    async def dead_retry(request: Request) -> Response:
        form = await checked_form(request)
        ids = None if form.get("all") == "1" else [int(str(v)) for v in form.getlist("run_id")]
        sent = await retry_dead(engine, ids, actor=actor(request))
        return back("/dead-letters", f"{sent} job(s) sent again")

    async def dead_discard(request: Request) -> Response:
        run_id: int = request.path_params["run_id"]
        form = await checked_form(request)
        try:
            await discard(engine, run_id, reason=str(form.get("reason", "")), actor=actor(request))
        except CrawlherdError as exc:
            return back("/dead-letters", f"not discarded: {exc}")
        return back("/dead-letters", f"run {run_id} discarded")

    # -- items, frontier, audit -------------------------------------------------------------------

    async def items_page(request: Request) -> Response:
        p = request.query_params
        rows = await browse_items(
            engine, website=p.get("website") or None, q=p.get("q", ""), location=p.get("location", ""),
            before_id=_int(p.get("before")), limit=PAGE,
        )
        return render(
            request, "items.html", rows=rows, params=dict(p), websites=await website_names(engine),
            next_before=rows[-1].id if len(rows) == PAGE else None,
        )

    async def items_export(request: Request) -> Response:
        fmt = request.query_params.get("format", "jsonl")
        if fmt not in FORMATS:
            raise HTTPException(400, f"format must be one of {', '.join(FORMATS)}")
        out = io.StringIO()
        await export_items(engine, out, fmt=fmt, website=request.query_params.get("website") or None)
        media = "text/csv" if fmt == "csv" else "application/x-ndjson"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        return Response(
            out.getvalue(), media_type=media,
            headers={"content-disposition": f'attachment; filename="items-{stamp}.{fmt}"'},
        )

    async def frontier_page(request: Request) -> Response:
        o = await overview(engine)
        workers = [(p, _host_rows(p)) for p in o.processes if p.kind == "worker"]
        return render(request, "frontier.html", workers=workers)

    async def audit_page(request: Request) -> Response:
        rows = await list_audit(engine, limit=200, before_id=_int(request.query_params.get("before")))
        return render(request, "audit.html", rows=rows)

    async def forbidden(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return PlainTextResponse(str(exc.detail), status_code=exc.status_code)

    async def user_error(request: Request, exc: Exception) -> Response:
        return PlainTextResponse(f"error: {exc}", status_code=400)

    # path -> its GET handler, its POST handler (the forms); {name:int} parameters arrive as ints
    pages: dict[str, tuple[Handler | None, Handler | None]] = {
        "/login": (login_page, login),
        "/logout": (None, logout),
        "/healthz": (healthz, None),
        "/": (overview_page, None),
        "/overview/live": (overview_live, None),
        "/overview.json": (overview_json, None),
        "/websites": (websites_page, website_create),
        "/websites/new": (website_new, None),
        "/websites/{website_id:int}": (website_page, website_update),
        "/websites/{website_id:int}/active": (None, website_active),
        "/websites/{website_id:int}/delete": (None, website_delete),
        "/targets": (targets_page, target_create),
        "/targets/new": (target_new, None),
        "/targets/import": (import_page, import_post),
        "/targets/{target_id:int}": (target_page, None),
        "/targets/{target_id:int}/run": (None, target_run),
        "/targets/{target_id:int}/active": (None, target_active),
        "/targets/{target_id:int}/delete": (None, target_delete),
        "/targets/{target_id:int}/schedule": (None, target_schedule),
        "/api/schedule-preview": (schedule_preview, None),
        "/jobs": (jobs_page, None),
        "/jobs/{run_id:int}": (job_page, None),
        "/dead-letters": (dead_page, None),
        "/dead-letters/retry": (None, dead_retry),
        "/dead-letters/{run_id:int}/discard": (None, dead_discard),
        "/items": (items_page, None),
        "/items/export": (items_export, None),
        "/frontier": (frontier_page, None),
        "/audit": (audit_page, None),
    }
    routes: list[Route | Mount] = [
        Route(path, handler, methods=[method])
        for path, handlers in pages.items()
        for method, handler in zip(("GET", "POST"), handlers, strict=True)
        if handler is not None
    ]
    routes.append(Mount("/static", app=StaticFiles(directory=str(_HERE.joinpath("static"))), name="static"))
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                SessionMiddleware,
                secret_key=secret_key or secrets.token_urlsafe(32),
                session_cookie="crawlherd_session",
                same_site="strict",
                max_age=12 * 3600,
            ),
            Middleware(LoginRequired),
        ],
        exception_handlers={HTTPException: forbidden, CrawlherdError: user_error},
    )
    app.state.engine = engine
    return app


@dataclass(frozen=True, slots=True)
class HostRow:
    """One host of a worker's frontier as the Frontier page shows it: its state, and when (wall clock,
    from the heartbeat's time) it is ready next."""

    host: str
    state: HostState
    ready_at: datetime


def _host_rows(p: ProcessInfo) -> list[HostRow]:
    """The hosts of a worker's frontier, from its heartbeat."""
    rows = []
    for host, values in p.info.get("frontier", {}).get("host_states", {}).items():
        st = HostState.from_summary(values)
        if st is not None:  # a worker of another version may write what this one cannot read
            rows.append(HostRow(host, st, p.last_seen + timedelta(seconds=st.ready_in)))
    return rows


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _json(value: Any) -> Response:
    """``value`` as a JSON response, datetimes (however deep) as ISO 8601."""
    return Response(json.dumps(value, default=_iso, ensure_ascii=False), media_type="application/json")
