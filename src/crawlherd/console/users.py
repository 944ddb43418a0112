"""Console users: names and argon2 password hashes in the config DB (the password itself is never
stored nor logged)."""

from __future__ import annotations

from datetime import datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd.console.audit import record
from crawlherd.db.engine import count_rows, db_now
from crawlherd.db.models import User
from crawlherd.errors import CrawlherdError

__all__ = ["MIN_PASSWORD", "add_user", "authenticate", "count_users", "list_users", "remove_user"]

MIN_PASSWORD = 8
_hasher = PasswordHasher()
# A hash to verify against when the user does not exist: the answer takes as long either way.
_DUMMY = _hasher.hash("crawlherd-no-such-user")


def _check(name: str, password: str) -> None:
    if not name or len(name) > 100 or not name.isprintable() or name.strip() != name:
        raise CrawlherdError("a user name is 1-100 printable characters, with no leading or trailing space")
    if len(password) < MIN_PASSWORD:
        raise CrawlherdError(f"a password needs at least {MIN_PASSWORD} characters")


async def add_user(engine: AsyncEngine, name: str, password: str, *, actor: str = "cli") -> None:
    """Create user ``name``, or set a new password when ``name`` exists."""
    _check(name, password)
    digest = _hasher.hash(password)
    async with engine.begin() as conn:
        now = await db_now(conn)
        exists = (await conn.execute(select(User.id).where(User.name == name))).first()
        if exists:
            await conn.execute(update(User).where(User.name == name).values(password_hash=digest))
            await record(conn, actor=actor, action="user.password", subject=f"user:{name}")
            return
        try:
            await conn.execute(insert(User).values(name=name, password_hash=digest, created_at=now))
        except IntegrityError as exc:  # a concurrent add
            raise CrawlherdError(f"user {name!r} exists already") from exc
        await record(conn, actor=actor, action="user.add", subject=f"user:{name}")


async def remove_user(engine: AsyncEngine, name: str, *, actor: str = "cli") -> bool:
    """Delete user ``name``; False when there is none."""
    async with engine.begin() as conn:
        gone = (await conn.execute(delete(User).where(User.name == name))).rowcount
        if gone:
            await record(conn, actor=actor, action="user.remove", subject=f"user:{name}")
    return bool(gone)


async def count_users(engine: AsyncEngine) -> int:
    """How many users are defined (0: the console is open on loopback only)."""
    async with engine.connect() as conn:
        return await count_rows(conn, User)


async def list_users(engine: AsyncEngine) -> list[tuple[str, datetime, datetime | None]]:
    """(name, created, last login) of every user."""
    async with engine.connect() as conn:
        rows = await conn.execute(select(User.name, User.created_at, User.last_login_at).order_by(User.name))
        return [(r[0], r[1], r[2]) for r in rows]


async def authenticate(engine: AsyncEngine, name: str, password: str) -> bool:
    """True when ``password`` is ``name``'s; records the login time."""
    async with engine.connect() as conn:
        digest = (await conn.execute(select(User.password_hash).where(User.name == name))).scalar_one_or_none()
    try:
        _hasher.verify(digest or _DUMMY, password)
    except (VerificationError, InvalidHashError):
        return False
    if digest is None:
        return False
    async with engine.begin() as conn:
        now = await db_now(conn)
        await conn.execute(update(User).where(User.name == name).values(last_login_at=now))
    return True
