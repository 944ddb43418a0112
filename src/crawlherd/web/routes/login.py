"""Logging in and out (``/login``, ``/logout``): a new server-side session (a fresh token and CSRF token)
at every login, throttled after repeated failures (:mod:`crawlherd.console.sessions`); logout ends it
on the server, so a copy of the cookie is refused afterwards."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from crawlherd.console.sessions import LoginOutcome, close_session, log_in
from crawlherd.console.users import Action
from crawlherd.web.auth import OPEN, checked_form
from crawlherd.web.common import RouteTable, engine, render

__all__ = ["login", "login_page", "logout", "routes"]

routes = RouteTable()


def _client(request: Request) -> str:
    # The peer's address, not a forwarded-for header any client could write.
    return request.client.host if request.client else "unknown"


@routes.get("/login", OPEN)
async def login_page(request: Request) -> Response:
    return render(request, "login.html", next=request.query_params.get("next", "/"), error=None)


@routes.post("/login", OPEN)
async def login(request: Request) -> Response:
    form = await checked_form(request)
    name, password = str(form.get("name", "")), str(form.get("password", ""))
    target = str(form.get("next", "/"))
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    result = await log_in(
        engine(request), name, password, client=_client(request), policy=request.app.state.session_policy
    )
    if result.outcome is LoginOutcome.THROTTLED:
        error = f"too many failed logins: try again in {result.retry_after} s"
        response = render(request, "login.html", status=429, next=target, error=error)
        response.headers["retry-after"] = str(result.retry_after)
        return response
    if result.outcome is LoginOutcome.WRONG:
        return render(request, "login.html", status=401, next=target, error="wrong name or password")
    old = request.session.get("sid")
    if isinstance(old, str):
        await close_session(engine(request), old)
    request.session.clear()
    request.session["sid"] = result.token
    request.session["csrf"] = secrets.token_urlsafe(32)
    return RedirectResponse(target, status_code=303)


@routes.post("/logout", Action.READ)
async def logout(request: Request) -> Response:
    await checked_form(request)
    token = request.session.get("sid")
    if isinstance(token, str):
        await close_session(engine(request), token)
    request.session.clear()
    return RedirectResponse("/login", status_code=303)
