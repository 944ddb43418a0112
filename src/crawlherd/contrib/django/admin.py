"""crawlherd's tables in the Django admin: websites and targets editable, the rest read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from pydantic import ValidationError

from crawlherd.contrib.django.models import DeadLetter, DispatchOutbox, JobRun, ScrapeTarget, StoredItem, Website
from crawlherd.sitespec import SiteSpec


class _ReadOnly(admin.ModelAdmin):  # type: ignore[misc]
    """Written by the dispatcher and the workers only."""

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class WebsiteForm(forms.ModelForm):  # type: ignore[misc]
    """A website's ``spec`` is validated by crawlherd's own ``SiteSpec`` (one set of rules and defaults)."""

    class Meta:
        model = Website
        fields = ("name", "spec")

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean()
        spec = data.get("spec")
        if isinstance(spec, dict):
            try:
                site = SiteSpec.model_validate({**spec, "name": data.get("name", spec.get("name"))})
            except ValidationError as exc:
                raise forms.ValidationError(f"invalid website settings: {exc}") from None
            data["spec"] = site.model_dump(mode="json")
        return data


@admin.register(Website)
class WebsiteAdmin(admin.ModelAdmin):  # type: ignore[misc]
    form = WebsiteForm
    list_display = ("name", "base_url", "pagination", "browser", "min_delay", "max_concurrency")
    search_fields = ("name",)

    @admin.display(description="base URL")  # type: ignore[untyped-decorator]
    def base_url(self, obj: Website) -> str:
        return str(obj.spec.get("base_url", ""))

    @admin.display(description="pagination")  # type: ignore[untyped-decorator]
    def pagination(self, obj: Website) -> str:
        return str((obj.spec.get("pagination") or {}).get("type", "none"))

    @admin.display(description="browser", boolean=True)  # type: ignore[untyped-decorator]
    def browser(self, obj: Website) -> bool:
        return bool(obj.spec.get("requires_playwright"))

    @admin.display(description="min delay (s)")  # type: ignore[untyped-decorator]
    def min_delay(self, obj: Website) -> object:
        return (obj.spec.get("politeness") or {}).get("min_delay", 1.0)

    @admin.display(description="max concurrency")  # type: ignore[untyped-decorator]
    def max_concurrency(self, obj: Website) -> object:
        return (obj.spec.get("politeness") or {}).get("max_concurrency", 2)


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
