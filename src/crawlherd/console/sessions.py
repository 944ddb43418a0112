"""Console logins kept on the server, and failed logins throttled.

A login (:func:`log_in`) makes a fresh random token -- a new one at every login, so a token planted
before cannot be carried across it -- and stores only its SHA-256 in ``console_sessions``. Every request
looks the token up (:func:`resolve_session`): a session idle for longer than
:attr:`SessionPolicy.idle`, or older than :attr:`SessionPolicy.absolute`, is deleted and refused. The row
goes at logout, when the user's password changes, when the user is removed and when an admin revokes
it (:func:`revoke_sessions`): a copied cookie stops working at once.

Failed logins are counted per user name and per client address (``login_throttle``). After
:attr:`SessionPolicy.free_failures` failures in a row, each further one blocks that name and that
address for twice as long as the last (from :attr:`~SessionPolicy.first_delay` up to
:attr:`~SessionPolicy.max_delay`); a login while blocked is refused without its password being looked
at. Failures are forgotten :attr:`~SessionPolicy.forget_after` after the last one; a good login clears
its user's count (not its address's: one valid account must not reset the guessing of others).

Every login -- good, wrong or refused as throttled -- is written to the audit trail with the client's
address. Times come from the policy's injected :class:`~crawlherd.clock.Clock`.
"""

from __future__ import annotations

import enum
import hashlib
import math
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd.clock import Clock, SystemClock
from crawlherd.console.audit import record
from crawlherd.console.users import Role, authenticate
from crawlherd.db.dialect import sql_capabilities
from crawlherd.db.models import ConsoleSession, LoginThrottle, User
from crawlherd.errors import ConfigurationError

__all__ = [
    "LoginOutcome",
    "LoginResult",
    "SessionPolicy",
    "SessionUser",
    "close_session",
    "log_in",
    "resolve_session",
    "revoke_sessions",
]


@dataclass(frozen=True, slots=True)
class SessionPolicy:
    """How long console sessions live and how failed logins are slowed down (seconds)."""

    #: A session unused for this long ends.
    idle: float = 30 * 60
    #: A session ends this long after its login, however busy.
    absolute: float = 12 * 3600
    #: Wrong passwords in a row (per name, per address) before the delays start.
    free_failures: int = 3
    #: The first delay; each further failure doubles it.
    first_delay: float = 1.0
    #: The longest delay.
    max_delay: float = 15 * 60
    #: Failures are forgotten this long after the last one.
    forget_after: float = 60 * 60
    clock: Clock = field(default_factory=SystemClock)

    def __post_init__(self) -> None:
        for name in ("idle", "absolute", "first_delay", "max_delay", "forget_after"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"console session {name} must be positive, not {getattr(self, name)!r}")
        if self.free_failures < 1:
            raise ConfigurationError("console free_failures must be at least 1")

    def now(self) -> datetime:
        """The policy clock's time, as an aware UTC datetime."""
        return datetime.fromtimestamp(self.clock.now(), UTC)

    def delay(self, failures: int) -> float:
        """How long a key is blocked after ``failures`` failures in a row."""
        over = failures - self.free_failures
        if over <= 0:
            return 0.0
        return float(min(self.max_delay, self.first_delay * 2.0 ** min(over - 1, 60)))


@dataclass(frozen=True, slots=True)
class SessionUser:
    """The user behind a live session."""

    name: str
    role: Role
    #: The session's row id (the token's SHA-256).
    session_id: str


class LoginOutcome(enum.Enum):
    """How a login ended."""

    OK = "ok"
    WRONG = "wrong"
    THROTTLED = "throttled"


@dataclass(frozen=True, slots=True)
class LoginResult:
    """A login's outcome; ``token`` (for the cookie) when it succeeded, ``retry_after`` (seconds) when
    it was refused as throttled."""

    outcome: LoginOutcome
    token: str | None = None
    retry_after: int = 0


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _throttle_keys(name: str, client: str) -> tuple[str, str]:
    return f"user:{name}"[:200], f"client:{client}"[:200]


async def _blocked_for(conn: AsyncConnection, keys: tuple[str, ...], now: datetime) -> float:
    until = (
        await conn.execute(select(LoginThrottle.blocked_until).where(LoginThrottle.key.in_(keys)))
    ).scalars().all()
    return max([(u - now).total_seconds() for u in until] + [0.0])


async def _count_failure(conn: AsyncConnection, key: str, now: datetime, policy: SessionPolicy) -> None:
    t = LoginThrottle
    row = (await conn.execute(select(t.failures, t.last_failure_at).where(t.key == key))).first()
    recent = row is not None and (now - row.last_failure_at).total_seconds() < policy.forget_after
    failures = (row.failures if recent and row is not None else 0) + 1
    values = {"failures": failures, "last_failure_at": now,
              "blocked_until": now + timedelta(seconds=policy.delay(failures))}
    stmt = sql_capabilities(conn).insert(t).values(key=key, **values)
    await conn.execute(stmt.on_conflict_do_update(index_elements=[t.key], set_=values))


async def _prune(conn: AsyncConnection, now: datetime, policy: SessionPolicy) -> None:
    """Forget throttle rows and sessions that can no longer matter (so neither table grows unbounded)."""
    stale = now - timedelta(seconds=policy.forget_after)
    await conn.execute(
        delete(LoginThrottle).where(LoginThrottle.last_failure_at < stale, LoginThrottle.blocked_until < now)
    )
    await conn.execute(
        delete(ConsoleSession).where(
            or_(
                ConsoleSession.last_seen_at < now - timedelta(seconds=policy.idle),
                ConsoleSession.created_at < now - timedelta(seconds=policy.absolute),
            )
        )
    )


async def log_in(
    engine: AsyncEngine, name: str, password: str, *, client: str, policy: SessionPolicy
) -> LoginResult:
    """Check ``name``'s ``password`` unless the name or the client address is blocked; on success, a new
    session (its token for the cookie). Audited, whatever the outcome; never with the password."""
    now = policy.now()
    keys = _throttle_keys(name, client)
    detail = {"client": client}
    async with engine.begin() as conn:
        wait = await _blocked_for(conn, keys, now)
        if wait > 0:
            await record(conn, actor=name, action="login.throttled", subject=f"user:{name}",
                         detail={**detail, "retry_after": math.ceil(wait)})
    if wait > 0:
        return LoginResult(LoginOutcome.THROTTLED, retry_after=math.ceil(wait))
    if not await authenticate(engine, name, password):
        async with engine.begin() as conn:
            for key in keys:
                await _count_failure(conn, key, now, policy)
            await record(conn, actor=name, action="login.failed", subject=f"user:{name}", detail=detail)
        return LoginResult(LoginOutcome.WRONG)
    token = secrets.token_urlsafe(32)
    async with engine.begin() as conn:
        user_id = (await conn.execute(select(User.id).where(User.name == name))).scalar_one_or_none()
        if user_id is None:  # removed between the check and now
            return LoginResult(LoginOutcome.WRONG)
        await _prune(conn, now, policy)
        await conn.execute(delete(LoginThrottle).where(LoginThrottle.key == keys[0]))
        await conn.execute(
            sql_capabilities(conn).insert(ConsoleSession).values(
                id=_digest(token), user_id=user_id, client=client[:100], created_at=now, last_seen_at=now
            )
        )
        await record(conn, actor=name, action="login", subject=f"user:{name}", detail=detail)
    return LoginResult(LoginOutcome.OK, token=token)


async def resolve_session(engine: AsyncEngine, token: str, policy: SessionPolicy) -> SessionUser | None:
    """The user of the live session ``token``; None (and the row deleted) when it has ended."""
    now = policy.now()
    sid = _digest(token)
    s = ConsoleSession
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(s.created_at, s.last_seen_at, User.name, User.role)
                .join(User, User.id == s.user_id)
                .where(s.id == sid)
            )
        ).first()
    if row is None:
        return None
    idle = (now - row.last_seen_at).total_seconds()
    if idle > policy.idle or (now - row.created_at).total_seconds() > policy.absolute:
        await close_session(engine, token)
        return None
    if idle > min(60.0, policy.idle / 10):  # one write a minute at most, not one per request
        async with engine.begin() as conn:
            await conn.execute(update(s).where(s.id == sid).values(last_seen_at=now))
    return SessionUser(row.name, Role.parse(row.role), sid)


async def close_session(engine: AsyncEngine, token: str) -> None:
    """End the session ``token`` (logout)."""
    async with engine.begin() as conn:
        await conn.execute(delete(ConsoleSession).where(ConsoleSession.id == _digest(token)))


async def revoke_sessions(engine: AsyncEngine, name: str, *, actor: str) -> int:
    """End every open session of user ``name`` (an admin's act, audited); how many there were."""
    async with engine.begin() as conn:
        user_id = (await conn.execute(select(User.id).where(User.name == name))).scalar_one_or_none()
        if user_id is None:
            return 0
        ended = int(
            (await conn.execute(delete(ConsoleSession).where(ConsoleSession.user_id == user_id))).rowcount
        )
        await record(conn, actor=actor, action="user.sessions.revoke", subject=f"user:{name}",
                     detail={"sessions_ended": ended})
    return ended
