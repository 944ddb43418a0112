"""Websites (``/websites``): the list, the form to add one, a website's page (its form, and what uses
it), enabling or disabling all its targets, and deleting it with everything it owns."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from crawlherd._redact import redact_url
from crawlherd.console import editing
from crawlherd.console.browse import WebsiteUsage, get_website, list_websites
from crawlherd.console.site_sessions import site_sessions
from crawlherd.console.users import Action
from crawlherd.duration import format_duration
from crawlherd.sitespec import SiteSpec
from crawlherd.web.auth import actor, checked_form
from crawlherd.web.common import RouteTable, back, duration, engine, form_errors, found, raw_form, render

__all__ = [
    "routes",
    "website_active",
    "website_create",
    "website_delete",
    "website_new",
    "website_page",
    "website_update",
    "websites_page",
]

routes = RouteTable()

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
        # read-only here (the targets file declares it); shown with the proxies' credentials redacted
        "fetch": redact_url(_json_text(site.fetch.model_dump(mode="json", exclude_defaults=True))),
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
            "min_delay": duration(text("min_delay") or "1s"),
            "max_concurrency": text("max_concurrency") or 2,
            "robots": text("robots") or "obey",
        },
        "revisit_age": duration(text("revisit_age") or "1d"),
    }
    for key in ("extraction", "metadata"):
        if text(key):
            try:
                values[key] = json.loads(text(key))
            except json.JSONDecodeError as exc:
                raise editing.FormError({key: f"not valid JSON: {exc}"}) from None
    return values


async def _form_page(
    request: Request, *, values: dict[str, str], errors: dict[str, str], usage: WebsiteUsage | None = None,
    status: int = 200,
) -> Response:
    sessions = await site_sessions(engine(request), values.get("name", "")) if usage is not None else None
    return render(request, "website_form.html", status=status, values=values, errors=errors, usage=usage,
                  sessions=sessions)


async def _website(request: Request) -> tuple[SiteSpec, WebsiteUsage]:
    return await found(get_website(engine(request), request.path_params["website_id"]))


@routes.get("/websites", Action.READ)
async def websites_page(request: Request) -> Response:
    return render(request, "websites.html", websites=await list_websites(engine(request)))


@routes.get("/websites/new", Action.EDIT)
async def website_new(request: Request) -> Response:
    return await _form_page(request, values=_website_form(None), errors={})


@routes.post("/websites", Action.EDIT)
async def website_create(request: Request) -> Response:
    raw = raw_form(await checked_form(request))
    db, who = engine(request), actor(request)
    errors = await form_errors(lambda: editing.save_website(db, _website_values(raw), actor=who))
    if errors is None:
        return back("/websites", f"website {raw.get('name', '')} saved")
    raw.update(base_url="", search_url_template="")  # a URL may hold a secret: typed again, never echoed
    return await _form_page(request, values=raw, errors=errors, status=400)


@routes.get("/websites/{website_id:int}", Action.READ)
async def website_page(request: Request) -> Response:
    site, usage = await _website(request)
    return await _form_page(request, values=_website_form(site), errors={}, usage=usage)


@routes.post("/websites/{website_id:int}", Action.EDIT)
async def website_update(request: Request) -> Response:
    site, usage = await _website(request)
    raw = raw_form(await checked_form(request))
    shown, stored = _website_form(site), site.model_dump(mode="json")
    # a field sent back as it was shown (its secrets redacted) keeps its stored value
    kept = [k for k in _REDACTED_FIELDS if raw.get(k, "").strip() == shown[k].strip()]

    async def save() -> None:
        values = _website_values({**raw, **dict.fromkeys(kept, "")})
        values.update({k: stored[k] for k in kept})
        values["fetch"] = stored["fetch"]  # not in the form: kept as the targets file declared it
        await editing.update_website(engine(request), usage.id, values, actor=actor(request))

    errors = await form_errors(save)
    if errors is None:
        return back(f"/websites/{usage.id}", "website saved")
    shown_again = {**raw, **{k: redact_url(raw.get(k, "")) for k in _REDACTED_FIELDS}, "fetch": shown["fetch"]}
    return await _form_page(request, values=shown_again, errors=errors, usage=usage, status=400)


@routes.post("/websites/{website_id:int}/active", Action.PAUSE)
async def website_active(request: Request) -> Response:
    _site, usage = await _website(request)
    active = (await checked_form(request)).get("active") == "1"
    changed = await editing.set_website_active(engine(request), usage.id, active, actor=actor(request))
    return back(f"/websites/{usage.id}", f"{changed} target(s) {'enabled' if active else 'disabled'}")


@routes.post("/websites/{website_id:int}/delete", Action.EDIT)
async def website_delete(request: Request) -> Response:
    _site, usage = await _website(request)
    form = await checked_form(request)
    try:
        confirm = str(form.get("confirm", ""))
        gone = await editing.delete_website(engine(request), usage.id, confirm=confirm, actor=actor(request))
    except editing.FormError as exc:
        return back(f"/websites/{usage.id}", f"not deleted: {exc.problems['confirm']}")
    return back(
        "/websites", f"website {gone.name} deleted with its {gone.targets} target(s), {gone.runs} job run(s) "
        f"and {gone.items} item(s)",
    )
