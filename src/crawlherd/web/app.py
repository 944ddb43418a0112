"""``crawlherd web``: the operator's console, a server-rendered ASGI application on the config DB.

:func:`create_app` assembles it (Starlette + Jinja2): the endpoints of :mod:`crawlherd.web.routes`, one
module per resource; the session and login-wall middleware of :mod:`crawlherd.web.auth`; and the state
the endpoints reach through ``request.app.state``: ``engine`` (the config DB), ``templates`` and
``title``. Templates are in ``templates/``, a little JavaScript in ``static/console.js`` for the live
overview and the schedule preview.

Every page reads the same functions the CLI calls (:mod:`crawlherd.console.overview`, ``.jobs``,
``.explain``, ``.run_now`` ...); every change goes through :mod:`crawlherd.console.editing`, ``.run_now``
or ``.dead_letters`` and is written to the audit trail. Secrets in URLs are redacted before anything is
rendered.
"""

from __future__ import annotations

import secrets
from importlib.resources import files

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from crawlherd.errors import CrawlherdError
from crawlherd.web.auth import LoginRequired
from crawlherd.web.common import make_templates
from crawlherd.web.routes import (
    audit,
    dead_letters,
    frontier,
    health,
    items,
    jobs,
    login,
    overview,
    schedules,
    target_import,
    targets,
    websites,
)

__all__ = ["create_app"]

#: The resources, each a module with its ``routes``.
RESOURCES = (
    login, health, overview, websites, targets, target_import, schedules, jobs, dead_letters, items, frontier,
    audit,
)


async def _http_error(request: Request, exc: Exception) -> Response:
    """A refused request (403 CSRF, 404, 400 ...): its reason as plain text."""
    assert isinstance(exc, HTTPException)
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code)


async def _user_error(request: Request, exc: Exception) -> Response:
    """A user's mistake the model refused: its message, never a traceback."""
    return PlainTextResponse(f"error: {exc}", status_code=400)


def create_app(engine: AsyncEngine, *, secret_key: str | None = None, title: str = "crawlherd") -> Starlette:
    """The console on ``engine`` (the caller's). ``secret_key`` signs the session cookies (default: a
    random key made now, so sessions end when the process does)."""
    routes: list[BaseRoute] = [route for resource in RESOURCES for route in resource.routes]
    static = StaticFiles(directory=str(files("crawlherd.web").joinpath("static")))
    routes.append(Mount("/static", app=static, name="static"))
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
        exception_handlers={HTTPException: _http_error, CrawlherdError: _user_error},
    )
    app.state.engine = engine
    app.state.templates = make_templates()
    app.state.title = title
    return app
