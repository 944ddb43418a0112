"""Users (``/users``, admins only): who may use the console and with which role; adding one, changing a
role or a password, ending someone's sessions, removing a user. Every change is audited, and a new
password or a removal ends that user's open sessions (:mod:`crawlherd.console.users`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from crawlherd.console.sessions import revoke_sessions
from crawlherd.console.users import Action, Role, add_user, list_users, remove_user, set_role
from crawlherd.errors import CrawlherdError
from crawlherd.web.auth import actor, checked_form
from crawlherd.web.common import RouteTable, back, engine, render

__all__ = ["routes", "user_add", "user_password", "user_remove", "user_revoke", "user_role", "users_page"]

routes = RouteTable()


@routes.get("/users", Action.USERS)
async def users_page(request: Request) -> Response:
    return render(request, "users.html", users=await list_users(engine(request)), roles=[r.label for r in Role])


async def _form(request: Request) -> tuple[str, dict[str, str]]:
    form = {k: str(v) for k, v in (await checked_form(request)).items()}
    return form.get("name", "").strip(), form


async def _change(work: Callable[[], Awaitable[str]], refused: str) -> Response:
    """Back to the users page saying what ``work`` did, or ``refused`` and why when it raises a
    :class:`~crawlherd.errors.CrawlherdError` (a bad role, an unknown or existing user...)."""
    try:
        done = await work()
    except CrawlherdError as exc:
        return back("/users", f"{refused}: {exc}")
    return back("/users", done)


@routes.post("/users/add", Action.USERS)
async def user_add(request: Request) -> Response:
    name, form = await _form(request)

    async def add() -> str:
        role = Role.parse(form.get("role", "viewer"))
        if await _exists(request, name):
            raise CrawlherdError(f"user {name!r} exists already: change their password below")
        await add_user(engine(request), name, form.get("password", ""), role=role, actor=actor(request))
        return f"user {name} added as {role.label}"

    return await _change(add, "not added")


async def _exists(request: Request, name: str) -> bool:
    return any(u.name == name for u in await list_users(engine(request)))


@routes.post("/users/role", Action.USERS)
async def user_role(request: Request) -> Response:
    name, form = await _form(request)

    async def change_role() -> str:
        role = Role.parse(form.get("role", ""))
        await set_role(engine(request), name, role, actor=actor(request))
        return f"{name} is now {role.label}"

    return await _change(change_role, "role not changed")


@routes.post("/users/password", Action.USERS)
async def user_password(request: Request) -> Response:
    name, form = await _form(request)

    async def change_password() -> str:
        if not await _exists(request, name):
            raise CrawlherdError(f"no user named {name!r}")
        await add_user(engine(request), name, form.get("password", ""), actor=actor(request))
        return f"password of {name} changed; their sessions ended"

    return await _change(change_password, "password not changed")


@routes.post("/users/revoke", Action.USERS)
async def user_revoke(request: Request) -> Response:
    name, _form_values = await _form(request)
    ended = await revoke_sessions(engine(request), name, actor=actor(request))
    return back("/users", f"{ended} session(s) of {name} ended")


@routes.post("/users/remove", Action.USERS)
async def user_remove(request: Request) -> Response:
    name, form = await _form(request)
    if form.get("confirm", "") != name:
        return back("/users", f"{name} not removed: type the name to confirm")

    async def remove() -> str:
        gone = await remove_user(engine(request), name, actor=actor(request))
        return f"user {name} removed" if gone else f"no user named {name}"

    return await _change(remove, "not removed")
