"""Crawlo's ``CrawloConfig`` (``crawlo.core.config``): settings dicts for a run mode,
``CrawloConfig.standalone(project_name="crawlo", **settings)``, ``.distributed(redis_host=, redis_port=,
redis_password=, redis_db=, project_name=, **settings)``, ``.auto(...)``, ``.from_env()``; keywords are
setting names in any case (``concurrency=20`` is ``CONCURRENCY``). ``to_dict()`` gives the settings,
checked by :class:`ConfigValidator`. (crawlherd's earlier helper of the same name, which opens a
frontier, is :class:`crawlherd.compat.crawlo.CrawloConfig`.)"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any
from urllib.parse import quote

from crawlherd.compat.crawlo.core.config.base import BASE_CONFIG, MODE_CONFIG_MAP

__all__ = ["ConfigValidator", "CrawloConfig"]

log = logging.getLogger("crawlherd.crawlo")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_QUEUE_TYPES = ("memory", "redis", "redis_stream", "auto")


class ConfigValidator:
    """Checks a settings dict: ``validate(settings)`` gives ``(ok, errors, warnings)``."""

    def validate(self, settings: dict[str, Any]) -> tuple[bool, list[str], list[str]]:
        errors: list[str] = []
        warnings: list[str] = []
        name = settings.get("PROJECT_NAME", "crawlo")
        if not isinstance(name, str) or not name.strip():
            # Crawlo's own words kept beside ours: its users search for them.
            errors.append("PROJECT_NAME must be a non-empty string (PROJECT_NAME 必须是非空字符串)")
        concurrency = settings.get("CONCURRENCY", 8)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            errors.append(f"CONCURRENCY must be an int >= 1, got {concurrency!r}")
        queue_type = settings.get("QUEUE_TYPE", "memory")
        if queue_type not in _QUEUE_TYPES:
            errors.append(f"QUEUE_TYPE must be one of {_QUEUE_TYPES}, got {queue_type!r}")
        level = settings.get("LOG_LEVEL", "INFO")
        if str(level).upper() not in _LOG_LEVELS:
            warnings.append(f"LOG_LEVEL {level!r} is not one of {_LOG_LEVELS}")
        return not errors, errors, warnings


def _redis_url(host: str, port: int, password: str | None, username: str | None, db: int) -> str:
    auth = f"{quote(username or '', safe='')}:{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/{db}"


class CrawloConfig:
    """A checked settings dict (see the module docstring)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.validator = ConfigValidator()
        self._validate()

    def _validate(self) -> None:
        ok, errors, warnings = self.validator.validate(self.settings)
        for warning in warnings:
            log.warning("configuration: %s", warning)
        if not ok:
            raise ValueError("invalid configuration:\n" + "\n".join(f"  - {e}" for e in errors))

    @staticmethod
    def _base(mode: str) -> dict[str, Any]:
        settings = copy.deepcopy(BASE_CONFIG)
        settings.update(copy.deepcopy(MODE_CONFIG_MAP[mode]))
        return settings

    @classmethod
    def standalone(cls, project_name: str = "crawlo", **kwargs: Any) -> CrawloConfig:
        settings = cls._base("standalone")
        settings["PROJECT_NAME"] = project_name
        settings.update({k.upper(): v for k, v in kwargs.items()})
        return cls(settings)

    @classmethod
    def distributed(cls, project_name: str = "crawlo", **kwargs: Any) -> CrawloConfig:
        given = {k.upper(): v for k, v in kwargs.items()}
        host = given.pop("REDIS_HOST", "127.0.0.1")
        port = int(given.pop("REDIS_PORT", 6379))
        password = given.pop("REDIS_PASSWORD", None) or None
        username = given.pop("REDIS_USERNAME", given.pop("REDIS_USER", None)) or None
        db = int(given.pop("REDIS_DB", 0))
        settings = cls._base("distributed")
        settings.update({
            "REDIS_HOST": host, "REDIS_PORT": port, "REDIS_PASSWORD": password, "REDIS_USER": username,
            "REDIS_DB": db, "REDIS_URL": _redis_url(host, port, password, username, db),
            "PROJECT_NAME": project_name, "SCHEDULER_QUEUE_NAME": f"crawlo:{project_name}:queue:requests",
        })
        settings.update(given)
        return cls(settings)

    @classmethod
    def auto(cls, project_name: str = "crawlo", **kwargs: Any) -> CrawloConfig:
        """The standalone preset with ``QUEUE_TYPE = "auto"``: the queue is Redis when Redis answers as
        it opens (the filter follows: see the Scheduler), memory otherwise."""
        settings = cls._base("standalone")
        settings.update({"RUN_MODE": "auto", "QUEUE_TYPE": "auto", "PROJECT_NAME": project_name})
        settings.update({k.upper(): v for k, v in kwargs.items()})
        return cls(settings)

    @classmethod
    def from_env(cls, default_mode: str = "standalone") -> CrawloConfig:
        """From ``CRAWLO_MODE``, ``CRAWLO_REDIS_HOST`` / ``_PORT`` / ``_PASSWORD`` / ``_DB``,
        ``CRAWLO_PROJECT_NAME``, ``CRAWLO_CONCURRENCY``, ``CRAWLO_LOG_LEVEL``."""
        env = os.environ
        kwargs: dict[str, Any] = {"project_name": env.get("CRAWLO_PROJECT_NAME", "crawlo")}
        for name, convert in (("CONCURRENCY", int), ("LOG_LEVEL", str)):
            if f"CRAWLO_{name}" in env:
                kwargs[name.lower()] = convert(env[f"CRAWLO_{name}"])
        mode = env.get("CRAWLO_MODE", default_mode).lower()
        if mode == "distributed":
            for name, convert in (("REDIS_HOST", str), ("REDIS_PORT", int), ("REDIS_PASSWORD", str), ("REDIS_DB", int)):
                if f"CRAWLO_{name}" in env:
                    kwargs[name.lower()] = convert(env[f"CRAWLO_{name}"])
            return cls.distributed(**kwargs)
        return cls.auto(**kwargs) if mode == "auto" else cls.standalone(**kwargs)

    def get(self, key: str, default: Any = None) -> Any:
        return self.settings.get(key, default)

    def set(self, key: str, value: Any) -> CrawloConfig:
        self.settings[key] = value
        self._validate()
        return self

    def update(self, settings: dict[str, Any]) -> CrawloConfig:
        self.settings.update(settings)
        self._validate()
        return self

    def enable_debug(self) -> CrawloConfig:
        return self.set("LOG_LEVEL", "DEBUG")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.settings)

    def __repr__(self) -> str:
        mode, queue = self.settings.get("RUN_MODE"), self.settings.get("QUEUE_TYPE")
        return f"CrawloConfig(RUN_MODE={mode!r}, QUEUE_TYPE={queue!r})"
