"""Unmanaged Django models of crawlherd's tables (``crawlherd.db.models`` is the source of truth).

A test (tests/integration/contrib/test_django.py) compares these with the SQLAlchemy models, table by
table and column by column (type and nullability). When crawlherd's schema changes (a new Alembic
migration), add the column here in the same commit. Database-side rules (cascades, unique keys, checks)
live in the schema; ``on_delete=DO_NOTHING`` leaves them to it.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils.timezone import now as _now

from crawlherd.db.models import (
    MISFIRE_POLICIES,
    OUTBOX_STATUSES,
    RUN_STATUSES,
    SCHEDULE_KINDS,
)

__all__ = ["DeadLetter", "DispatchOutbox", "JobRun", "ScrapeTarget", "StoredItem", "Website"]


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v.replace("_", " ")) for v in values]


class JSONColumn(models.JSONField):  # type: ignore[misc]
    """A ``json`` column (crawlherd's type; Django's own JSONField is ``jsonb`` on PostgreSQL)."""

    def db_type(self, connection: Any) -> str:
        return "json" if connection.vendor == "postgresql" else str(super().db_type(connection))

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor == "postgresql" and value is not None:
            from psycopg.types.json import Json

            return Json(value)
        return super().get_db_prep_value(value, connection, prepared)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None or not isinstance(value, str | bytes):  # the driver decoded json already
            return value
        return super().from_db_value(value, expression, connection)


class _Table(models.Model):  # type: ignore[misc]
    """A crawlherd table: its ``id``; the schema is crawlherd's (Alembic), not Django's (unmanaged)."""

    id = models.BigAutoField(primary_key=True)

    class Meta:
        abstract = True
        managed = False


class _Edited(_Table):
    """A table whose rows are created and edited by people (websites, targets)."""

    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta(_Table.Meta):
        abstract = True


class Website(_Edited):
    """A site to crawl (table ``websites``): its name and its ``SiteSpec``."""

    name = models.CharField(max_length=200, unique=True)
    #: The website's whole configuration: the JSON form of a crawlherd ``SiteSpec`` (validated on save
    #: by the admin form with crawlherd's own model).
    spec = JSONColumn()

    class Meta(_Edited.Meta):
        db_table = "websites"
        ordering = ["name"]

    def __str__(self) -> str:
        return str(self.name)


class ScrapeTarget(_Edited):
    """Website x keywords x location and its schedule (table ``scrape_targets``)."""

    website = models.ForeignKey(Website, on_delete=models.DO_NOTHING, related_name="targets")
    keywords = models.TextField()
    location = models.TextField(default="", blank=True)
    schedule_kind = models.CharField(max_length=10, choices=_choices(SCHEDULE_KINDS))
    interval_seconds = models.FloatField(null=True, blank=True)
    cron = models.CharField(max_length=200, null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    anchor_at = models.DateTimeField(null=True, blank=True)
    jitter_ms = models.BigIntegerField(default=0)
    misfire_policy = models.CharField(max_length=10, choices=_choices(MISFIRE_POLICIES), default="skip")
    backfill_limit = models.IntegerField(default=0)
    misfire_grace_seconds = models.FloatField(default=60.0)
    active = models.BooleanField(default=True)
    last_scheduled = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField()

    class Meta(_Edited.Meta):
        db_table = "scrape_targets"
        ordering = ["next_run_at"]

    def __str__(self) -> str:
        where = f" @ {self.location}" if self.location else ""
        return f"{self.keywords}{where} ({self.website_id})"


class _TargetSlot(_Table):
    """A row per (target, slot): the columns the outbox and the runs share."""

    target = models.ForeignKey(ScrapeTarget, on_delete=models.DO_NOTHING, related_name="%(class)s_rows")
    slot_at = models.DateTimeField()
    attempts = models.IntegerField(default=0)

    class Meta(_Table.Meta):
        abstract = True
        ordering = ["-slot_at"]


class DispatchOutbox(_TargetSlot):
    """One job message per (target, slot) (table ``dispatch_outbox``)."""

    key = models.CharField(max_length=100)
    status = models.CharField(max_length=10, choices=_choices(OUTBOX_STATUSES), default="pending")
    leased_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=100, null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    body = models.TextField()
    created_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta(_TargetSlot.Meta):
        db_table = "dispatch_outbox"
        verbose_name_plural = "dispatch outbox"


class JobRun(_TargetSlot):
    """One execution record per (target, slot) (table ``job_runs``)."""

    job_id = models.CharField(max_length=36)
    status = models.CharField(max_length=10, choices=_choices(RUN_STATUSES), default="queued")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: when its listing ended (its detail pages may still be out: the run stays ``running`` until they settle)
    listed_at = models.DateTimeField(null=True, blank=True)
    pages = models.IntegerField(default=0)
    items_new = models.IntegerField(default=0)
    items_updated = models.IntegerField(default=0)
    error = models.TextField(null=True, blank=True)
    worker = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta(_TargetSlot.Meta):
        db_table = "job_runs"


class _DeadManager(models.Manager):  # type: ignore[misc]
    def get_queryset(self) -> Any:
        return super().get_queryset().filter(status="dead")


class DeadLetter(JobRun):
    """The dead letters: runs with status ``dead`` (``crawlherd jobs dead`` / ``jobs retry``)."""

    objects = _DeadManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter"


class StoredItem(_Table):
    """A scraped item (table ``items``)."""

    fingerprint = models.CharField(max_length=64, unique=True)
    website = models.ForeignKey(Website, on_delete=models.DO_NOTHING, related_name="items")
    target = models.ForeignKey(ScrapeTarget, on_delete=models.DO_NOTHING, null=True, blank=True,
                               related_name="items")
    url = models.TextField()
    data = JSONColumn(default=dict, blank=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta(_Table.Meta):
        db_table = "items"
        ordering = ["-last_seen"]
        verbose_name = "item"
