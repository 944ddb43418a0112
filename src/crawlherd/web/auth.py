"""Who may use the console, and for what: server-side sessions, roles, CSRF tokens, and the
loopback-only open mode.

- Users live in the config DB (``crawlherd users add NAME --password-stdin``, or the Users page), with
  argon2 hashes and a role (:class:`crawlherd.console.users.Role`).
- A login starts a session kept on the server (:mod:`crawlherd.console.sessions`): the cookie
  (``HttpOnly``, ``SameSite=Strict``, signed) carries a random token that is looked up on every
  request, so logout, a password change, the user's removal or an admin ends it at once.
- Every endpoint says the action it does, hence the role it needs (:func:`needs`); ``create_app``
  refuses an endpoint that does not, so no route is left unguarded by omission.
- Every form carries the session's CSRF token; a POST without it (or with another) is refused (403).
- With no user defined, the console is open, and only on a loopback address: :func:`check_bind`
  refuses any other address until a user exists; the open console acts as an admin.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from crawlherd.console.sessions import SessionPolicy, SessionUser, resolve_session
from crawlherd.console.users import Action, Forbidden, Role, count_users, require
from crawlherd.errors import ConfigurationError

__all__ = [
    "LOCAL_ACTOR",
    "OPEN",
    "Endpoint",
    "LoginRequired",
    "actor",
    "check_bind",
    "checked_form",
    "csrf_token",
    "is_loopback",
    "needed_role",
    "needs",
    "role",
]

#: The actor recorded in the audit trail when no user is defined (open, loopback-only mode).
LOCAL_ACTOR = "local"
#: The role an endpoint open to anyone (logged in or not) "needs": the login page, health, static files.
OPEN = None
_OPEN_PATHS = ("/login", "/static/", "/healthz")

Endpoint = Callable[[Request], Awaitable[Response]]
_ROLE_ATTR = "__crawlherd_role__"


def needs(action: Action | None) -> Callable[[Endpoint], Endpoint]:
    """Mark (and guard) an endpoint as doing ``action``: it answers 403 unless the request's role is at
    least the one ``action`` needs (:class:`~crawlherd.console.users.Action`, the table the CLI checks
    too; :data:`OPEN`: anyone, even without a login)."""
    needed = action.role if action is not None else None

    def mark(endpoint: Endpoint) -> Endpoint:
        @functools.wraps(endpoint)
        async def guarded(request: Request) -> Response:
            if action is not None:
                try:
                    require(role(request), action)
                except Forbidden as exc:
                    raise HTTPException(403, str(exc)) from None
            return await endpoint(request)

        setattr(guarded, _ROLE_ATTR, needed)
        return guarded

    return mark


def needed_role(endpoint: object) -> tuple[bool, Role | None]:
    """(whether ``endpoint`` was marked by :func:`needs`, the role it needs)."""
    return hasattr(endpoint, _ROLE_ATTR), getattr(endpoint, _ROLE_ATTR, None)


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


def _user(request: Request) -> SessionUser | None:
    user = getattr(request.state, "user", None)
    return user if isinstance(user, SessionUser) else None


def actor(request: Request) -> str:
    """The logged-in user's name, or :data:`LOCAL_ACTOR` in open mode."""
    user = _user(request)
    return user.name if user is not None else LOCAL_ACTOR


def role(request: Request) -> Role:
    """The request's role: its user's; admin in open mode; viewer (the least) for anyone else."""
    user = _user(request)
    if user is not None:
        return user.role
    return Role.ADMIN if getattr(request.state, "open_mode", False) else Role.VIEWER


class LoginRequired(BaseHTTPMiddleware):
    """Finds the request's live session (``request.state.user``), and sends requests without one to the
    login page as soon as one user exists."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        path = request.url.path
        request.state.open_mode = False
        request.state.user = None
        policy: SessionPolicy = request.app.state.session_policy
        token = request.session.get("sid")
        if isinstance(token, str):
            request.state.user = await resolve_session(request.app.state.engine, token, policy)
            if request.state.user is None:  # ended (logout elsewhere, removal, timeout): a new anonymous one
                request.session.clear()
        if path.startswith(_OPEN_PATHS) or request.state.user is not None:
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
