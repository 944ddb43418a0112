"""The config DB tables (SQLAlchemy 2 declarative models). The schema itself is created by the
Alembic migrations in :mod:`crawlherd.db.migrations`, never by ``create_all``; a test checks that the
two agree.

Times are stored in UTC (``timestamptz`` on PostgreSQL, ISO text on SQLite) and always come back as
aware :class:`datetime` objects.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from crawlherd.db.dialect import sql_capabilities

__all__ = [
    "AuditEntry",
    "Base",
    "ConsoleSession",
    "DiscardedRun",
    "DispatchOutbox",
    "DETAIL_STATUSES",
    "JobAttempt",
    "JobDetail",
    "JobRun",
    "LoginThrottle",
    "ManualRun",
    "OutboxTrail",
    "ProcessHeartbeat",
    "ScrapeTarget",
    "StoredItem",
    "User",
    "UTCDateTime",
    "Website",
]

SCHEDULE_KINDS = ("interval", "cron")
MISFIRE_POLICIES = ("skip", "latest", "backfill")
OUTBOX_STATUSES = ("pending", "published", "dead")
RUN_STATUSES = ("queued", "running", "succeeded", "failed", "dead")
USER_ROLES = ("viewer", "operator", "admin")

# SQLite makes only "INTEGER PRIMARY KEY" an auto-incrementing rowid alias.
BigID = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every dialect; naive datetimes are refused on the way in."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware (UTC) datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if sql_capabilities(dialect).naive_datetimes else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _partial_index(name: str, *columns: str, where: str) -> Index:
    """An index over the rows matching ``where`` only, on PostgreSQL and SQLite alike."""
    return Index(name, *columns, postgresql_where=text(where), sqlite_where=text(where))


class Base(DeclarativeBase):
    """Declarative base of the config DB."""

    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}


class TargetSlotRow:
    """The key of a row about one slot of one target -- an outbox row, a run, an attempt, a "Run now":
    an id, the target (its rows go with it) and the slot time. Mixed into those tables' classes."""

    id: Mapped[int] = mapped_column(BigID, primary_key=True, sort_order=-3)
    target_id: Mapped[int] = mapped_column(
        ForeignKey("scrape_targets.id", ondelete="CASCADE"), sort_order=-2
    )
    slot_at: Mapped[datetime] = mapped_column(sort_order=-1)


class Website(Base):
    """A site to crawl: its name and its whole configuration, ``spec`` -- the JSON form of a
    :class:`crawlherd.sitespec.SiteSpec` (``SiteSpec.model_validate(row.spec)`` gives it back)."""

    __tablename__ = "websites"
    __table_args__ = (UniqueConstraint("name", name="uq_websites_name"),)

    id: Mapped[int] = mapped_column(BigID, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))
    updated_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))


class ScrapeTarget(Base):
    """One website x keywords x location combination and its schedule."""

    __tablename__ = "scrape_targets"
    __table_args__ = (
        UniqueConstraint("website_id", "keywords", "location", name="uq_scrape_targets_combo"),
        CheckConstraint(_in("schedule_kind", SCHEDULE_KINDS), name="ck_scrape_targets_schedule_kind"),
        CheckConstraint(_in("misfire_policy", MISFIRE_POLICIES), name="ck_scrape_targets_misfire_policy"),
        _partial_index("ix_scrape_targets_due", "next_run_at", where="active"),
    )

    id: Mapped[int] = mapped_column(BigID, primary_key=True)
    website_id: Mapped[int] = mapped_column(ForeignKey("websites.id", ondelete="CASCADE"), index=True)
    keywords: Mapped[str] = mapped_column(Text)
    location: Mapped[str] = mapped_column(Text, default="")  # "" = no location
    schedule_kind: Mapped[str] = mapped_column(String(10))
    interval_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    cron: Mapped[str | None] = mapped_column(String(200), nullable=True)
    timezone: Mapped[str] = mapped_column(String(64), default="UTC")
    anchor_at: Mapped[datetime | None] = mapped_column(nullable=True)  # interval slots: anchor + k*interval
    jitter_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    misfire_policy: Mapped[str] = mapped_column(String(10), default="skip")
    backfill_limit: Mapped[int] = mapped_column(Integer, default=0)
    misfire_grace_seconds: Mapped[float] = mapped_column(Float, default=60.0)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    last_scheduled: Mapped[datetime | None] = mapped_column(nullable=True)
    next_run_at: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))
    updated_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))


class DispatchOutbox(TargetSlotRow, Base):
    """One job message per (target, slot), written in the tick's transaction and relayed to the broker."""

    __tablename__ = "dispatch_outbox"
    __table_args__ = (
        UniqueConstraint("target_id", "slot_at", name="uq_dispatch_outbox_target_slot"),
        CheckConstraint(_in("status", OUTBOX_STATUSES), name="ck_dispatch_outbox_status"),
        _partial_index("ix_dispatch_outbox_pending", "leased_until", "id", where="status = 'pending'"),
        _partial_index("ix_dispatch_outbox_published", "published_at", where="status = 'published'"),
    )

    key: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(10), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    leased_until: Mapped[datetime | None] = mapped_column(nullable=True)  # also "not before" after a failure
    lease_owner: Mapped[str | None] = mapped_column(String(100), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    published_at: Mapped[datetime | None] = mapped_column(nullable=True)


class JobRun(TargetSlotRow, Base):
    """One execution record per (target, slot), written by the workers; ``dead`` = dead letter."""

    __tablename__ = "job_runs"
    __table_args__ = (
        UniqueConstraint("target_id", "slot_at", name="uq_job_runs_target_slot"),
        CheckConstraint(_in("status", RUN_STATUSES), name="ck_job_runs_status"),
    )

    job_id: Mapped[str] = mapped_column(String(36))
    status: Mapped[str] = mapped_column(String(10), default="queued")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)
    pages: Mapped[int] = mapped_column(Integer, default=0)
    items_new: Mapped[int] = mapped_column(Integer, default=0)
    items_updated: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    #: When the running attempt's listing chain ended (its detail pages may still be out), else None.
    listed_at: Mapped[datetime | None] = mapped_column(nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))
    updated_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))


#: A detail page of a run: ``out`` (queued, not settled yet), ``stored`` or ``failed`` (with the reason).
DETAIL_STATUSES = ("out", "stored", "failed")


class JobDetail(TargetSlotRow, Base):
    """A detail page a job run queued (one per run and item): the run succeeds once none is ``out``.
    Settled by item (whichever run's request fetched the page settles every run waiting for it)."""

    __tablename__ = "job_details"
    __table_args__ = (
        UniqueConstraint("target_id", "slot_at", "item", name="uq_job_details_run_item"),
        CheckConstraint(_in("status", DETAIL_STATUSES), name="ck_job_details_status"),
        Index("ix_job_details_item_status", "item", "status"),
    )

    item: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(8), default="out")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))


class StoredItem(Base):
    """A scraped item, upserted by the workers on ``fingerprint``."""

    __tablename__ = "items"
    __table_args__ = (UniqueConstraint("fingerprint", name="uq_items_fingerprint"),)

    id: Mapped[int] = mapped_column(BigID, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    website_id: Mapped[int] = mapped_column(ForeignKey("websites.id", ondelete="CASCADE"), index=True)
    target_id: Mapped[int | None] = mapped_column(
        ForeignKey("scrape_targets.id", ondelete="SET NULL"), nullable=True, index=True
    )
    url: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


# -- the operator's console (migration 0003) ------------------------------------------------------

PROCESS_KINDS = ("dispatcher", "worker", "web")


class User(Base):
    """A console user: a name, an argon2 password hash (never the password) and a role (``viewer``,
    ``operator`` or ``admin``)."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("name", name="uq_users_name"),)

    id: Mapped[int] = mapped_column(BigID, primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    password_hash: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    last_login_at: Mapped[datetime | None] = mapped_column(nullable=True)
    role: Mapped[str] = mapped_column(String(10), server_default="admin")


class ConsoleSession(Base):
    """A console login, kept on the server: the cookie carries a random token, this row its SHA-256
    (``id``). Deleting the row ends the session at once (logout, password change, removal, an admin)."""

    __tablename__ = "console_sessions"
    __table_args__ = (Index("ix_console_sessions_user_id", "user_id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigID, ForeignKey("users.id", ondelete="CASCADE"))
    client: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]


class LoginThrottle(Base):
    """Failed logins per key (``user:NAME`` or ``client:ADDRESS``): how many in a row, and until when
    the next login for that key is refused without looking at its password."""

    __tablename__ = "login_throttle"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    last_failure_at: Mapped[datetime]
    blocked_until: Mapped[datetime]


class AuditEntry(Base):
    """One change made through the console or the CLI: who, what, when."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"),)

    id: Mapped[int] = mapped_column(BigID, primary_key=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(100))
    subject: Mapped[str] = mapped_column(String(200), default="")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ProcessHeartbeat(Base):
    """A dispatcher, worker or console process: registered at start, beating while it lives."""

    __tablename__ = "process_heartbeats"
    __table_args__ = (
        CheckConstraint(_in("kind", PROCESS_KINDS), name="ck_process_heartbeats_kind"),
        Index("ix_process_heartbeats_last_seen", "last_seen"),
    )

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    version: Mapped[str] = mapped_column(String(50))
    started_at: Mapped[datetime]
    last_seen: Mapped[datetime]
    stopped_at: Mapped[datetime | None] = mapped_column(nullable=True)
    interval_seconds: Mapped[float] = mapped_column(Float)
    jobs_in_hand: Mapped[int] = mapped_column(Integer, default=0)
    info: Mapped[dict[str, Any]] = mapped_column(default=dict)


class ManualRun(TargetSlotRow, Base):
    """A "Run now" request: one ad-hoc slot of a target, written to the outbox in the same transaction.
    ``request_key`` is unique: the same request (a double click, a retried form) makes one slot."""

    __tablename__ = "manual_runs"
    __table_args__ = (
        UniqueConstraint("request_key", name="uq_manual_runs_request_key"),
        Index("ix_manual_runs_target", "target_id", "slot_at"),
    )

    request_key: Mapped[str] = mapped_column(String(100))
    requested_by: Mapped[str] = mapped_column(String(100))
    requested_at: Mapped[datetime]


class OutboxTrail(Base):
    """Who handled an outbox row: the dispatcher that claimed its slot, the relay that published it and
    to which broker (redacted URL)."""

    __tablename__ = "outbox_trail"

    outbox_id: Mapped[int] = mapped_column(ForeignKey("dispatch_outbox.id", ondelete="CASCADE"), primary_key=True)
    claimed_by: Mapped[str] = mapped_column(String(200))
    published_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    broker: Mapped[str | None] = mapped_column(String(300), nullable=True)


class JobAttempt(TargetSlotRow, Base):
    """One attempt of a job run (``job_runs`` keeps only the latest): worker, timings, outcome."""

    __tablename__ = "job_attempts"
    __table_args__ = (
        UniqueConstraint("target_id", "slot_at", "attempt", name="uq_job_attempts_attempt"),
        Index("ix_job_attempts_started_at", "started_at"),
    )

    attempt: Mapped[int] = mapped_column(Integer)
    worker: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(10))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)
    pages: Mapped[int] = mapped_column(Integer, default=0)
    items_new: Mapped[int] = mapped_column(Integer, default=0)
    items_updated: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class DiscardedRun(Base):
    """A dead job an operator discarded (with the reason): no longer listed among the dead letters."""

    __tablename__ = "discarded_runs"

    run_id: Mapped[int] = mapped_column(ForeignKey("job_runs.id", ondelete="CASCADE"), primary_key=True)
    discarded_by: Mapped[str] = mapped_column(String(100))
    discarded_at: Mapped[datetime]
    reason: Mapped[str] = mapped_column(Text)


# Indexes the console's pages need on the existing tables (listed here, not in the classes, so that the
# tables above stay as migration 0001 made them): jobs by status (newest first), by time window;
# outbox rows by creation time; items by first / last seen.
Index("ix_job_runs_status_id", JobRun.status, JobRun.id)
Index("ix_job_runs_updated_at", JobRun.updated_at, JobRun.status)
Index("ix_dispatch_outbox_created_at", DispatchOutbox.created_at)
Index("ix_items_first_seen", StoredItem.first_seen)
Index("ix_items_last_seen", StoredItem.last_seen)
