"""crawlherd's tables in the Django admin: websites and targets editable, the rest read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from crawlherd.contrib.django.models import DeadLetter, DispatchOutbox, JobRun, ScrapeTarget, StoredItem, Website


class _ReadOnly(admin.ModelAdmin):  # type: ignore[misc]
    """Written by the dispatcher and the workers only."""

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Website)
class WebsiteAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = ("name", "base_url", "pagination_type", "requires_playwright", "min_delay", "max_concurrency")
    search_fields = ("name", "base_url")


@admin.register(ScrapeTarget)
class ScrapeTargetAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = ("id", "website", "keywords", "location", "schedule_kind", "interval_seconds", "cron", "active",
                    "next_run_at", "last_scheduled")
    list_filter = ("active", "schedule_kind", "website")
    search_fields = ("keywords", "location")
    list_editable = ("active",)


@admin.register(DispatchOutbox)
class DispatchOutboxAdmin(_ReadOnly):
    list_display = ("key", "status", "attempts", "slot_at", "published_at", "last_error")
    list_filter = ("status",)


@admin.register(JobRun)
class JobRunAdmin(_ReadOnly):
    list_display = ("target", "slot_at", "status", "attempts", "pages", "items_new", "items_updated", "worker")
    list_filter = ("status",)


@admin.register(DeadLetter)
class DeadLetterAdmin(_ReadOnly):
    list_display = ("target", "slot_at", "attempts", "error", "finished_at")


@admin.register(StoredItem)
class StoredItemAdmin(_ReadOnly):
    list_display = ("url", "website", "target", "first_seen", "last_seen")
    search_fields = ("url",)
