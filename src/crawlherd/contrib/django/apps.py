"""The app's configuration."""

from __future__ import annotations

from django.apps import AppConfig


class CrawlherdConfig(AppConfig):  # type: ignore[misc]
    """crawlherd's tables in the Django admin (label ``crawlherd``)."""

    name = "crawlherd.contrib.django"
    label = "crawlherd"
    verbose_name = "crawlherd"
    default_auto_field = "django.db.models.BigAutoField"
