"""``crawlherd web``: the operator's console, a server-rendered ASGI application on the config DB.

:func:`create_app` assembles it (Starlette + Jinja2): the endpoints of :mod:`crawlherd.web.routes`, one
module per resource; the session and login-wall middleware of :mod:`crawlherd.web.auth`; the security headers of
:mod:`crawlherd.web.headers` around everything; and the state the endpoints reach through
``request.app.state``: ``engine`` (the config DB), ``templates``, ``title`` and ``session_policy``.
Templates are in ``templates/``, a little JavaScript in ``static/console.js`` for the live
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
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from crawlherd.console.sessions import SessionPolicy
from crawlherd.console.users import Forbidden
from crawlherd.errors import CrawlherdError
from crawlherd.web.auth import LoginRequired, needed_role
from crawlherd.web.common import error_page, make_templates
from crawlherd.web.headers import SecurityHeaders
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
    users,
    websites,
)

__all__ = ["create_app"]

#: The resources, each a module with its ``routes``.
RESOURCES = (
    login, health, overview, websites, targets, target_import, schedules, jobs, dead_letters, items, frontier,
    audit, users,
)


async def _http_error(request: Request, exc: Exception) -> Response:
    """A refused request (403 CSRF or role, 404, 400 ...): its reason, on a page of the console."""
    assert isinstance(exc, HTTPException)
    return error_page(request, exc.status_code, str(exc.detail))


async def _user_error(request: Request, exc: Exception) -> Response:
    """A user's mistake the model refused: its message, never a traceback."""
    return error_page(request, 403 if isinstance(exc, Forbidden) else 400, str(exc))


class _Console(Starlette):
    """The console: a Starlette app whose every response -- a 500 made by Starlette's outermost error
    middleware included -- carries the security headers."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def _check_guarded(routes: list[BaseRoute]) -> None:
    """Every endpoint says which role it needs (:func:`crawlherd.web.auth.needs`), or the app is not made."""
    for route in routes:
        if isinstance(route, Route) and not needed_role(route.endpoint)[0]:
            raise RuntimeError(f"console route {route.path} does not say which role it needs (web.auth.needs)")


def create_app(
    engine: AsyncEngine,
    *,
    secret_key: str | None = None,
    title: str = "crawlherd",
    session_policy: SessionPolicy | None = None,
) -> Starlette:
    """The console on ``engine`` (the caller's). ``secret_key`` signs the session cookies (default: a
    random key made now, so sessions end when the process does); ``session_policy``: the sessions'
    timeouts and the login throttle (default: :class:`~crawlherd.console.sessions.SessionPolicy`)."""
    policy = session_policy or SessionPolicy()
    routes: list[BaseRoute] = [route for resource in RESOURCES for route in resource.routes]
    _check_guarded(routes)
    static = StaticFiles(directory=str(files("crawlherd.web").joinpath("static")))
    routes.append(Mount("/static", app=static, name="static"))
    app = _Console(
        routes=routes,
        middleware=[
            Middleware(
                SessionMiddleware,
                secret_key=secret_key or secrets.token_urlsafe(32),
                session_cookie="crawlherd_session",
                same_site="strict",
                max_age=int(policy.absolute),
            ),
            Middleware(LoginRequired),
        ],
        exception_handlers={HTTPException: _http_error, CrawlherdError: _user_error},
    )
    app.state.engine = engine
    app.state.templates = make_templates()
    app.state.title = title
    app.state.session_policy = policy
    return app
