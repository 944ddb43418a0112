"""Who may use the console: login sessions, CSRF tokens, and the loopback-only open mode.

- Users live in the config DB (``crawlherd users add NAME --password-stdin``), with argon2 hashes.
- A login starts a session: a signed cookie (``HttpOnly``, ``SameSite=Strict``), signed with a key made
  at start-up (sessions end when the console restarts; nothing secret is kept on disk).
- Every form carries the session's CSRF token; a POST without it (or with another) is refused (403).
- With no user defined, the console is open, and only on a loopback address: :func:`check_bind`
  refuses any other address until a user exists.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from crawlherd.console.users import count_users
from crawlherd.errors import ConfigurationError

__all__ = ["LOCAL_ACTOR", "LoginRequired", "actor", "check_bind", "checked_form", "csrf_token", "is_loopback"]

#: The actor recorded in the audit trail when no user is defined (open, loopback-only mode).
LOCAL_ACTOR = "local"
_OPEN_PATHS = ("/login", "/static/", "/healthz")


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made on first use)."""
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


async def checked_form(request: Request) -> FormData:
    """The posted form, once its CSRF token matched the session's; else 403."""
    form = await request.form()
    sent = form.get("csrf")
    expected = request.session.get("csrf")
    if not isinstance(sent, str) or not isinstance(expected, str) or not hmac.compare_digest(sent, expected):
        raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
    return form


def actor(request: Request) -> str:
    """The logged-in user's name, or :data:`LOCAL_ACTOR` in open mode."""
    user = request.session.get("user")
    return user if isinstance(user, str) else LOCAL_ACTOR


class LoginRequired(BaseHTTPMiddleware):
    """Sends requests without a session to the login page, as soon as one user exists."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        path = request.url.path
        request.state.open_mode = False
        if path.startswith(_OPEN_PATHS):
            return await call_next(request)
        if isinstance(request.session.get("user"), str):
            return await call_next(request)
        if await count_users(request.app.state.engine) == 0:
            request.state.open_mode = True
            return await call_next(request)
        if request.method == "GET":
            return RedirectResponse(f"/login?next={request.url.path}", status_code=303)
        return Response("log in first", status_code=401)


def is_loopback(host: str) -> bool:
    """True for ``127.0.0.0/8``, ``::1`` and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, users: int) -> None:
    """Refuse to serve a non-loopback address while no user is defined."""
    if not is_loopback(host) and users == 0:
        raise ConfigurationError(
            f"refusing to serve the console on {host}: no user is defined, so anyone who can reach it could "
            "change the platform. Add one first (`crawlherd users add NAME --password-stdin`) or bind 127.0.0.1"
        )
