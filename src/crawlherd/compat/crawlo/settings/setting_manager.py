"""Crawlo's ``SettingManager`` (``crawlo.settings.setting_manager``): a project's settings, Crawlo's
defaults for the scheduler layer underneath.

Only the defaults of what crawlherd's Crawlo layer reads are here (:data:`DEFAULTS`: the run mode,
queue, filter, full-queue policy, Redis and concurrency settings); any other setting a project sets
is kept and returned as it is.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

__all__ = ["DEFAULTS", "SettingManager"]

#: Crawlo's defaults for the settings the scheduler layer reads.
DEFAULTS: dict[str, Any] = {
    "PROJECT_NAME": "crawlo",
    "RUN_MODE": "standalone",
    "QUEUE_TYPE": "auto",
    "FILTER_CLASS": "crawlo.filters.MemoryFilter",
    "DEFAULT_DEDUP_PIPELINE": "crawlo.pipelines.MemoryDedupPipeline",
    "CONCURRENCY": 8,
    "DEPTH_PRIORITY": 1,
    "SCHEDULER_MAX_QUEUE_SIZE": 50000,
    "ENQUEUE_FULL_POLICY": "drop_with_counter",
    "ENQUEUE_BLOCK_TIMEOUT": None,
    "ENQUEUE_DROP_TIMEOUT": 50.0,
    "REDIS_HOST": "127.0.0.1",
    "REDIS_PORT": 6379,
    "REDIS_PASSWORD": None,
    "REDIS_DB": 0,
    "FILTER_DEBUG": False,
    "MEMORY_FILTER_MAX_CAPACITY": 1_000_000,
    "MEMORY_FILTER_CLEANUP_THRESHOLD": 0.8,
}

_MISSING = object()


class SettingManager:
    """``SettingManager(values=None)``: :data:`DEFAULTS`, then ``values``. ``get(key, default)``
    gives the setting when there is one (a default included), else ``default``."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self.attributes: dict[str, Any] = copy.deepcopy(DEFAULTS)
        if values:
            self.update_attributes(dict(values))

    def set_settings(self, module: str | ModuleType | object) -> None:
        """Take the upper-case names of a settings module (or its dotted name)."""
        source = importlib.import_module(module) if isinstance(module, str) else module
        self.update_attributes({name: getattr(source, name) for name in dir(source) if name.isupper()})

    def get(self, key: str, default: Any = None) -> Any:
        value = self.attributes.get(key, _MISSING)
        return default if value is _MISSING else value

    def get_int(self, key: str, default: int = 0) -> int:
        return int(self.get(key, default))

    def get_float(self, key: str, default: float = 0.0) -> float:
        return float(self.get(key, default))

    def get_bool(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)

    def get_list(self, key: str, default: list[Any] | None = None) -> list[Any]:
        value = self.get(key, default)
        if value is None:
            return []
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return list(value)

    def get_dict(self, key: str, default: dict[str, Any] | None = None) -> dict[str, Any]:
        value = self.get(key, default)
        return dict(value or {})

    def set(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:
        return self.attributes.setdefault(key, default)

    def update(self, other: Mapping[str, Any]) -> None:
        self.update_attributes(dict(other))

    def update_attributes(self, attributes: Mapping[str, Any] | None) -> None:
        for key, value in (attributes or {}).items():
            self.set(key, value)

    def __getitem__(self, key: str) -> Any:
        return self.attributes[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        del self.attributes[key]

    def __contains__(self, key: object) -> bool:
        return key in self.attributes

    def __iter__(self) -> Iterator[str]:
        return iter(self.attributes)

    def __len__(self) -> int:
        return len(self.attributes)

    def __repr__(self) -> str:
        return f"<SettingManager {len(self.attributes)} settings>"

    def copy(self) -> SettingManager:
        return SettingManager(copy.deepcopy(self.attributes))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.attributes)
