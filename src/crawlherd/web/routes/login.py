"""Logging in and out (``/login``, ``/logout``): a session cookie with the user's name and a fresh CSRF token."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from crawlherd.console.users import authenticate
from crawlherd.web.auth import checked_form
from crawlherd.web.common import engine, render

__all__ = ["login", "login_page", "logout", "routes"]


async def login_page(request: Request) -> Response:
    return render(request, "login.html", next=request.query_params.get("next", "/"), error=None)


async def login(request: Request) -> Response:
    form = await checked_form(request)
    name, password = str(form.get("name", "")), str(form.get("password", ""))
    target = str(form.get("next", "/"))
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    if not await authenticate(engine(request), name, password):
        return render(request, "login.html", status=401, next=target, error="wrong name or password")
    request.session.clear()
    request.session["user"] = name
    request.session["csrf"] = secrets.token_urlsafe(32)
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    await checked_form(request)
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


routes = [
    Route("/login", login_page, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
