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

__all__ = [
    "Base",
    "DispatchOutbox",
    "StoredItem",
    "JobRun",
    "ScrapeTarget",
    "UTCDateTime",
    "Website",
]

SCHEDULE_KINDS = ("interval", "cron")
MISFIRE_POLICIES = ("skip", "latest", "backfill")
OUTBOX_STATUSES = ("pending", "published", "dead")
RUN_STATUSES = ("queued", "running", "succeeded", "failed", "dead")

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
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

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


class DispatchOutbox(Base):
    """One job message per (target, slot), written in the tick's transaction and relayed to the broker."""

    __tablename__ = "dispatch_outbox"
    __table_args__ = (
        UniqueConstraint("target_id", "slot_at", name="uq_dispatch_outbox_target_slot"),
        CheckConstraint(_in("status", OUTBOX_STATUSES), name="ck_dispatch_outbox_status"),
        _partial_index("ix_dispatch_outbox_pending", "leased_until", "id", where="status = 'pending'"),
        _partial_index("ix_dispatch_outbox_published", "published_at", where="status = 'published'"),
    )

    id: Mapped[int] = mapped_column(BigID, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("scrape_targets.id", ondelete="CASCADE"))
    slot_at: Mapped[datetime]
    key: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(10), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    leased_until: Mapped[datetime | None] = mapped_column(nullable=True)  # also "not before" after a failure
    lease_owner: Mapped[str | None] = mapped_column(String(100), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    published_at: Mapped[datetime | None] = mapped_column(nullable=True)


class JobRun(Base):
    """One execution record per (target, slot), written by the workers; ``dead`` = dead letter."""

    __tablename__ = "job_runs"
    __table_args__ = (
        UniqueConstraint("target_id", "slot_at", name="uq_job_runs_target_slot"),
        CheckConstraint(_in("status", RUN_STATUSES), name="ck_job_runs_status"),
    )

    id: Mapped[int] = mapped_column(BigID, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("scrape_targets.id", ondelete="CASCADE"))
    slot_at: Mapped[datetime]
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
    created_at: Mapped[datetime] = mapped_column(default=lambda: datetime.now(UTC))
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
