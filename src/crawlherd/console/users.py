"""Console users: names, argon2 password hashes (the password itself is never stored nor logged) and
roles.

A role is what a user may do, each one including the one before:

- ``viewer`` reads every page;
- ``operator`` also runs targets now, pauses and resumes them, retries and discards dead letters;
- ``admin`` also edits websites and targets, imports targets files and manages users.

:class:`Action` is the one table of what each thing asked of the console model needs: the console's
routes (``@needs(Action.X)``) and the CLI's commands (acting ``--as`` a user) both check it.

A password change or a removal ends the user's open sessions (:mod:`crawlherd.console.sessions`) in the
same transaction.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from datetime import datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.console.audit import record
from crawlherd.db.engine import count_rows, db_now
from crawlherd.db.models import ConsoleSession, User
from crawlherd.errors import CrawlherdError

__all__ = [
    "MIN_PASSWORD",
    "Action",
    "Forbidden",
    "Role",
    "UserInfo",
    "add_user",
    "authenticate",
    "count_users",
    "list_users",
    "remove_user",
    "require",
    "set_role",
    "user_role",
]

MIN_PASSWORD = 8
_hasher = PasswordHasher()


@functools.cache
def _dummy_hash() -> str:
    """A hash to verify against when the user does not exist: the answer takes as long either way.
    Made on first use, not at import (an Argon2 hash costs ~90 ms of CPU in every crawlherd process)."""
    return _hasher.hash("crawlherd-no-such-user")


class Role(enum.IntEnum):
    """What a user may do; a higher role may do everything a lower one may."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        """The role's name as stored and shown: ``viewer``, ``operator``, ``admin``."""
        return self.name.lower()

    @classmethod
    def parse(cls, value: str) -> Role:
        """The role named ``value``; a :class:`CrawlherdError` naming the known ones otherwise."""
        try:
            return cls[value.strip().upper()]
        except KeyError:
            known = ", ".join(r.label for r in cls)
            raise CrawlherdError(f"unknown role {value!r}: one of {known}") from None


class Forbidden(CrawlherdError):
    """The user's role does not allow what was asked."""


class Action(enum.Enum):
    """What a user may ask of the console (in the browser or on the command line), each with the least
    role that may do it (:attr:`role`): the one table both the web routes and the CLI check."""

    READ = "read"
    RUN_NOW = "run a target now"
    PAUSE = "enable or disable targets"
    RETRY = "retry dead letters"
    DISCARD = "discard a dead letter"
    EDIT = "add, change or delete websites and targets"
    IMPORT = "import a targets file"
    USERS = "manage users"

    @property
    def role(self) -> Role:
        """The least role that may do this."""
        return _NEEDED[self]


_NEEDED: dict[Action, Role] = {
    Action.READ: Role.VIEWER,
    Action.RUN_NOW: Role.OPERATOR,
    Action.PAUSE: Role.OPERATOR,
    Action.RETRY: Role.OPERATOR,
    Action.DISCARD: Role.OPERATOR,
    Action.EDIT: Role.ADMIN,
    Action.IMPORT: Role.ADMIN,
    Action.USERS: Role.ADMIN,
}


def require(role: Role, action: Action) -> None:
    """Refuse ``action`` (:class:`Forbidden`) unless ``role`` is at least the one it needs."""
    if role < action.role:
        raise Forbidden(f"this needs the {action.role.label} role (to {action.value}); you are {role.label}")


@dataclass(frozen=True, slots=True)
class UserInfo:
    """One user as the Users page and ``crawlherd users list`` show it."""

    name: str
    role: Role
    created_at: datetime
    last_login_at: datetime | None
    sessions: int


def _check(name: str, password: str) -> None:
    if not name or len(name) > 100 or not name.isprintable() or name.strip() != name:
        raise CrawlherdError("a user name is 1-100 printable characters, with no leading or trailing space")
    if len(password) < MIN_PASSWORD:
        raise CrawlherdError(f"a password needs at least {MIN_PASSWORD} characters")


async def _end_sessions(conn: AsyncConnection, user_id: int) -> int:
    return int((await conn.execute(delete(ConsoleSession).where(ConsoleSession.user_id == user_id))).rowcount)


async def _admins(conn: AsyncConnection) -> int:
    return await count_rows(conn, User, User.role == Role.ADMIN.label)


async def add_user(
    engine: AsyncEngine, name: str, password: str, *, role: Role | None = None, actor: str = "cli"
) -> Role:
    """Create user ``name``, or set a new password (and ``role`` when given) when ``name`` exists; a new
    password ends the user's open sessions. A new user's role defaults to ``admin`` for the first user
    and ``viewer`` for the others. Returns the user's role."""
    _check(name, password)
    digest = _hasher.hash(password)
    async with engine.begin() as conn:
        now = await db_now(conn)
        row = (await conn.execute(select(User.id, User.role).where(User.name == name))).first()
        if row is not None:
            values: dict[str, str] = {"password_hash": digest}
            if role is not None:
                await _check_demotion(conn, row.role, role)
                values["role"] = role.label
            await conn.execute(update(User).where(User.id == row.id).values(**values))
            ended = await _end_sessions(conn, row.id)
            await record(conn, actor=actor, action="user.password", subject=f"user:{name}",
                         detail={"sessions_ended": ended, **({"role": role.label} if role else {})})
            return role or Role.parse(row.role)
        if role is None:
            role = Role.ADMIN if await count_rows(conn, User) == 0 else Role.VIEWER
        try:
            await conn.execute(
                insert(User).values(name=name, password_hash=digest, created_at=now, role=role.label)
            )
        except IntegrityError as exc:  # a concurrent add
            raise CrawlherdError(f"user {name!r} exists already") from exc
        await record(conn, actor=actor, action="user.add", subject=f"user:{name}", detail={"role": role.label})
        return role


async def _check_demotion(conn: AsyncConnection, current: str, new: Role) -> None:
    if current == Role.ADMIN.label and new != Role.ADMIN and await _admins(conn) <= 1:
        raise CrawlherdError("this is the last admin: make another user admin first")


async def set_role(engine: AsyncEngine, name: str, role: Role, *, actor: str) -> None:
    """Give user ``name`` ``role`` (their open sessions see it on their next request). The last admin
    stays admin."""
    async with engine.begin() as conn:
        current = (await conn.execute(select(User.role).where(User.name == name))).scalar_one_or_none()
        if current is None:
            raise CrawlherdError(f"no user named {name!r}")
        await _check_demotion(conn, current, role)
        await conn.execute(update(User).where(User.name == name).values(role=role.label))
        await record(conn, actor=actor, action="user.role", subject=f"user:{name}",
                     detail={"from": current, "to": role.label})


async def remove_user(engine: AsyncEngine, name: str, *, actor: str = "cli") -> bool:
    """Delete user ``name`` and end their open sessions; False when there is none."""
    async with engine.begin() as conn:
        row = (await conn.execute(select(User.id, User.role).where(User.name == name))).first()
        if row is None:
            return False
        if row.role == Role.ADMIN.label and await _admins(conn) <= 1 and await count_rows(conn, User) > 1:
            raise CrawlherdError("this is the last admin: make another user admin first")
        ended = await _end_sessions(conn, row.id)
        await conn.execute(delete(User).where(User.id == row.id))
        await record(conn, actor=actor, action="user.remove", subject=f"user:{name}",
                     detail={"sessions_ended": ended})
    return True


async def count_users(engine: AsyncEngine) -> int:
    """How many users are defined (0: the console is open on loopback only)."""
    async with engine.connect() as conn:
        return await count_rows(conn, User)


async def list_users(engine: AsyncEngine) -> list[UserInfo]:
    """Every user, by name, with their role and how many sessions they have open."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(User.id, User.name, User.role, User.created_at, User.last_login_at).order_by(User.name)
        )
        users = rows.all()
        per_user = select(ConsoleSession.user_id, func.count()).group_by(ConsoleSession.user_id)
        counts: dict[int, int] = {uid: n for uid, n in (await conn.execute(per_user)).all()}
        return [UserInfo(r.name, Role.parse(r.role), r.created_at, r.last_login_at, counts.get(r.id, 0)) for r in users]


async def user_role(engine: AsyncEngine, name: str) -> Role | None:
    """``name``'s role; None when there is no such user."""
    async with engine.connect() as conn:
        role = (await conn.execute(select(User.role).where(User.name == name))).scalar_one_or_none()
    return Role.parse(role) if role is not None else None


async def authenticate(engine: AsyncEngine, name: str, password: str) -> bool:
    """True when ``password`` is ``name``'s; records the login time."""
    async with engine.connect() as conn:
        digest = (await conn.execute(select(User.password_hash).where(User.name == name))).scalar_one_or_none()
    try:
        _hasher.verify(digest or _dummy_hash(), password)
    except (VerificationError, InvalidHashError):
        return False
    if digest is None:
        return False
    async with engine.begin() as conn:
        now = await db_now(conn)
        await conn.execute(update(User).where(User.name == name).values(last_login_at=now))
    return True
