"""What every endpoint module of the console shares (:mod:`crawlherd.web.routes`).

- the application's state, as ``create_app`` left it on ``request.app.state``: :func:`engine` (the config
  DB), the templates (:func:`make_templates`) and the page title;
- :func:`render` (a template with the session's CSRF token, the user, their role and the title),
  :func:`error_page` (a refusal, on a page of the console) and :func:`back` (a 303 redirect after a
  form, with a flash message);
- reading forms and query strings: :func:`raw_form`, :func:`int_param`, :func:`time_param`,
  :func:`choice_param`, :func:`website_filter` (and a whole :class:`Listing`), :func:`duration`;
  :data:`PAGE` rows a page, and the next page's key (:func:`next_key`);
- :func:`form_errors` (a form's save, and what it refused, by field), :func:`found` (a 404 when a lookup
  finds nothing) and :func:`json_response`;
- :class:`RouteTable`: a module's routes, each declared on its endpoint.

The CSRF check and the login wall are :mod:`crawlherd.web.auth`'s.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any, TypeVar

from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from crawlherd._redact import redact_url
from crawlherd.console.browse import website_names
from crawlherd.console.editing import FormError
from crawlherd.console.users import Action, Role
from crawlherd.errors import CrawlherdError
from crawlherd.web.auth import Endpoint, actor, csrf_token, needs, role

__all__ = [
    "PAGE",
    "Listing",
    "RouteTable",
    "back",
    "choice_param",
    "duration",
    "engine",
    "error_page",
    "form_errors",
    "found",
    "int_param",
    "json_response",
    "make_templates",
    "next_key",
    "raw_form",
    "render",
    "time_param",
    "ts",
    "website_filter",
]

#: Rows a listing page shows; a full page links to the next.
PAGE = 50

_HERE = files("crawlherd.web")
_T = TypeVar("_T")


class RouteTable(list[Route]):
    """A module's routes, each declared on its endpoint with the action it does (aiohttp's
    ``RouteTableDef``): ``routes = RouteTable()``, then ``@routes.get("/path", Action.READ)`` or
    ``@routes.post(...)`` on the endpoint, which is guarded by :func:`~crawlherd.web.auth.needs`
    (``OPEN``: anyone, even without a login)."""

    def get(self, path: str, action: Action | None) -> Callable[[Endpoint], Endpoint]:
        return self._add(path, "GET", action)

    def post(self, path: str, action: Action | None) -> Callable[[Endpoint], Endpoint]:
        return self._add(path, "POST", action)

    def _add(self, path: str, method: str, action: Action | None) -> Callable[[Endpoint], Endpoint]:
        def add(endpoint: Endpoint) -> Endpoint:
            guarded = needs(action)(endpoint)
            self.append(Route(path, guarded, methods=[method]))
            return guarded

        return add


# -- the application's state ---------------------------------------------------------------------------


def engine(request: Request) -> AsyncEngine:
    """The config DB's engine (``app.state.engine``)."""
    db: AsyncEngine = request.app.state.engine
    return db


def ts(value: datetime | None) -> str:
    """A time as the console shows it: UTC, to the second; ``-`` for none."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def _rows(text: str, cols: int = 80, least: int = 2) -> int:
    """How many rows a textarea of ``cols`` columns needs to show ``text`` whole (long lines wrap)."""
    lines = str(text).split("\n")
    return max(least, sum(max(1, -(-len(line) // cols)) for line in lines) + 1)


def make_templates() -> Jinja2Templates:
    """The console's templates (``templates/``, autoescaped) with its filters: ``ts``, ``age``,
    ``redact`` (secrets in URLs), ``rows`` (a textarea's height for its text) and ``tojson_pretty``."""
    env = Environment(
        loader=FileSystemLoader(str(_HERE.joinpath("templates"))),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["ts"] = ts
    env.filters["age"] = _age
    env.filters["redact"] = lambda v: redact_url(str(v)) if v is not None else ""
    env.filters["rows"] = _rows
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    return Jinja2Templates(env=env)


# -- responses -----------------------------------------------------------------------------------------


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Template ``name`` with ``context``, the session's CSRF token, the user and the console's title."""
    open_mode = getattr(request.state, "open_mode", False)
    may = role(request)
    context.update(
        request=request,
        csrf=csrf_token(request),
        user=actor(request),
        role=may.label,
        can_operate=may >= Role.OPERATOR,
        can_admin=may >= Role.ADMIN,
        signed_in=open_mode or getattr(request.state, "user", None) is not None,
        open_mode=open_mode,
        title=request.app.state.title,
    )
    templates: Jinja2Templates = request.app.state.templates
    return templates.TemplateResponse(request, name, context, status_code=status)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    """A refused request's reason (``message``), with its ``status``, on a page of the console."""
    return render(request, "error.html", status=status, status_code=status, message=message)


def back(url: str, message: str | None = None) -> RedirectResponse:
    """A 303 to ``url`` after a form, with ``message`` shown there as a flash."""
    if message:
        sep = "&" if "?" in url else "?"
        url = f"{url}{sep}flash={message}"
    return RedirectResponse(url, status_code=303)


async def found(lookup: Awaitable[_T]) -> _T:
    """What ``lookup`` finds; a 404 when it finds nothing (it raised CrawlherdError)."""
    try:
        return await lookup
    except CrawlherdError as exc:
        raise HTTPException(404, str(exc)) from None


async def form_errors(save: Callable[[], Awaitable[object]]) -> dict[str, str] | None:
    """Call ``save`` (a form's values checked and stored); what it refused, by field (``form`` for the
    whole), or None when it saved."""
    try:
        await save()
    except FormError as exc:
        return exc.problems
    except CrawlherdError as exc:
        return {"form": str(exc)}
    return None


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def json_response(value: Any) -> Response:
    """``value`` as a JSON response, datetimes (however deep) as ISO 8601."""
    return Response(json.dumps(value, default=_iso, ensure_ascii=False), media_type="application/json")


# -- forms and query strings -----------------------------------------------------------------------------


def raw_form(form: Mapping[str, Any]) -> dict[str, str]:
    """A posted form's fields (but its CSRF token) as text."""
    return {k: str(v) for k, v in form.items() if k != "csrf"}


def int_param(value: str | None) -> int | None:
    """A form's or query's whole number; None when empty; 400 when not a number."""
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        raise HTTPException(400, f"not a number: {value!r}") from None


def time_param(value: str | None) -> datetime | None:
    """A form's or query's ISO time (UTC when it has no offset); None when empty; 400 when not a time."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, f"not a time: {value!r} (use 2026-01-31T07:00 or with +01:00)") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def choice_param(name: str, value: str | None, allowed: Sequence[str]) -> str | None:
    """A query's ``name`` that must be one of ``allowed``; None when empty; 400 naming the allowed ones
    when it is anything else (an unknown filter is a mistake to say, not to ignore)."""
    if not value:
        return None
    if value not in allowed:
        raise HTTPException(400, f"unknown {name} {value!r}: use one of {', '.join(allowed)}")
    return value


async def website_filter(request: Request) -> tuple[str | None, list[str]]:
    """A listing's ``?website=`` filter: the website chosen (:func:`choice_param`; None: every one) and
    the names it may be (the filter's choices)."""
    names = await website_names(engine(request))
    return choice_param("website", request.query_params.get("website"), names), names


@dataclass(frozen=True, slots=True)
class Listing:
    """What a listing page filtered by website and paged by ``?before=`` reads from its query: the
    query itself (``params``), the website chosen (:func:`website_filter`) and the names it may be,
    and the key the page starts before."""

    params: Mapping[str, str]
    website: str | None
    websites: list[str]
    before: int | None

    @classmethod
    async def read(cls, request: Request) -> Listing:
        website, names = await website_filter(request)
        return cls(request.query_params, website, names, int_param(request.query_params.get("before")))

    def context(self, rows: Sequence[Any]) -> dict[str, Any]:
        """The template's part: the query, the websites to choose from, the next page's key."""
        return {"params": dict(self.params), "websites": self.websites, "next_before": next_key(rows)}


def duration(value: str) -> str | float:
    """A form's duration: a bare number is seconds, anything else ("15m", "1h30m") is parsed later."""
    try:
        return float(value)
    except ValueError:
        return value


def next_key(rows: Sequence[Any]) -> int | None:
    """The key of the next page after ``rows`` (the last row's ``id``), None when this page is not full."""
    return int(rows[-1].id) if len(rows) == PAGE else None
