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


class Website(models.Model):  # type: ignore[misc]
    """A site to crawl (table ``websites``): its name and its ``SiteSpec``."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200, unique=True)
    #: The website's whole configuration: the JSON form of a crawlherd ``SiteSpec`` (validated on save
    #: by the admin form with crawlherd's own model).
    spec = JSONColumn()
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        managed = False
        db_table = "websites"
        ordering = ["name"]

    def __str__(self) -> str:
        return str(self.name)


class ScrapeTarget(models.Model):  # type: ignore[misc]
    """Website x keywords x location and its schedule (table ``scrape_targets``)."""

    id = models.BigAutoField(primary_key=True)
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
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        managed = False
        db_table = "scrape_targets"
        ordering = ["next_run_at"]

    def __str__(self) -> str:
        where = f" @ {self.location}" if self.location else ""
        return f"{self.keywords}{where} ({self.website_id})"


class DispatchOutbox(models.Model):  # type: ignore[misc]
    """One job message per (target, slot) (table ``dispatch_outbox``)."""

    id = models.BigAutoField(primary_key=True)
    target = models.ForeignKey(ScrapeTarget, on_delete=models.DO_NOTHING, related_name="outbox")
    slot_at = models.DateTimeField()
    key = models.CharField(max_length=100)
    status = models.CharField(max_length=10, choices=_choices(OUTBOX_STATUSES), default="pending")
    attempts = models.IntegerField(default=0)
    leased_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=100, null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    body = models.TextField()
    created_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        managed = False
        db_table = "dispatch_outbox"
        ordering = ["-slot_at"]
        verbose_name_plural = "dispatch outbox"


class JobRun(models.Model):  # type: ignore[misc]
    """One execution record per (target, slot) (table ``job_runs``)."""

    id = models.BigAutoField(primary_key=True)
    target = models.ForeignKey(ScrapeTarget, on_delete=models.DO_NOTHING, related_name="runs")
    slot_at = models.DateTimeField()
    job_id = models.CharField(max_length=36)
    status = models.CharField(max_length=10, choices=_choices(RUN_STATUSES), default="queued")
    attempts = models.IntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    pages = models.IntegerField(default=0)
    items_new = models.IntegerField(default=0)
    items_updated = models.IntegerField(default=0)
    error = models.TextField(null=True, blank=True)
    worker = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        managed = False
        db_table = "job_runs"
        ordering = ["-slot_at"]


class _DeadManager(models.Manager):  # type: ignore[misc]
    def get_queryset(self) -> Any:
        return super().get_queryset().filter(status="dead")


class DeadLetter(JobRun):
    """The dead letters: runs with status ``dead`` (``crawlherd jobs dead`` / ``jobs retry``)."""

    objects = _DeadManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter"


class StoredItem(models.Model):  # type: ignore[misc]
    """A scraped item (table ``items``)."""

    id = models.BigAutoField(primary_key=True)
    fingerprint = models.CharField(max_length=64, unique=True)
    website = models.ForeignKey(Website, on_delete=models.DO_NOTHING, related_name="items")
    target = models.ForeignKey(ScrapeTarget, on_delete=models.DO_NOTHING, null=True, blank=True,
                               related_name="items")
    url = models.TextField()
    data = JSONColumn(default=dict, blank=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "items"
        ordering = ["-last_seen"]
        verbose_name = "item"
