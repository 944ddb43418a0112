"""crawlherd's :class:`~crawlherd.settings.Settings` from the Django project's settings."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from django.conf import settings as django_settings

from crawlherd.errors import ConfigurationError
from crawlherd.settings import ENV_PREFIX, Settings, load_settings

__all__ = ["crawlherd_settings", "database_url_of"]


def database_url_of(alias: str = "default") -> str:
    """The crawlherd URL of Django database ``alias`` (PostgreSQL or SQLite)."""
    try:
        db: dict[str, Any] = django_settings.DATABASES[alias]
    except KeyError:
        raise ConfigurationError(f"CRAWLHERD['database']: Django has no database {alias!r}") from None
    engine = str(db.get("ENGINE", ""))
    if engine.endswith("postgresql"):
        user = quote(str(db.get("USER") or ""), safe="")
        password = quote(str(db.get("PASSWORD") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = db.get("HOST") or "localhost"
        port = db.get("PORT") or 5432
        return f"postgresql://{auth}{host}:{port}/{quote(str(db['NAME']), safe='')}"
    if engine.endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    raise ConfigurationError(
        f"Django database {alias!r} uses {engine!r}; crawlherd's config DB is PostgreSQL or SQLite: give "
        "CRAWLHERD['database_url'] explicitly")


def crawlherd_settings(**overrides: Any) -> Settings:
    """Defaults < crawlherd.toml < ``CRAWLHERD_*`` environment < ``settings.CRAWLHERD`` < ``overrides`` (a
    management command's flags; None values are ignored); the config DB is Django's ``default`` database
    unless the environment or ``CRAWLHERD`` names one."""
    conf = dict(getattr(django_settings, "CRAWLHERD", {}))
    alias = str(conf.pop("database", "default"))
    if "database_url" not in conf and f"{ENV_PREFIX}DATABASE_URL" not in os.environ:
        conf["database_url"] = database_url_of(alias)
    conf.update({k: v for k, v in overrides.items() if v is not None})
    return load_settings(**conf)
