"""How Crawlo puts a project's settings together (``crawlo.project``): Crawlo's defaults, then the
project's settings module, then what its ``RUN_MODE`` decides, then the run's own settings.

The run mode decides ``QUEUE_TYPE``, ``FILTER_CLASS`` and ``DEFAULT_DEDUP_PIPELINE`` whatever the
settings module says (switching mode is how a project switches queue); its other presets fill only
what is not set. ``QUEUE_TYPE = "auto"`` keeps a filter the project chose, and otherwise takes the Redis
filter when Redis answers now (else the memory one).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from crawlherd.compat.crawlo.settings.setting_manager import SettingManager

__all__ = ["_get_mode_settings", "_load_project_settings", "_update_queue_related_settings"]

log = logging.getLogger("crawlherd.crawlo")

_QUEUE_PRESETS = {
    "redis": {"FILTER_CLASS": "crawlo.filters.AioRedisFilter",
              "DEFAULT_DEDUP_PIPELINE": "crawlo.pipelines.RedisDedupPipeline"},
    "memory": {"FILTER_CLASS": "crawlo.filters.MemoryFilter",
               "DEFAULT_DEDUP_PIPELINE": "crawlo.pipelines.MemoryDedupPipeline"},
}


def _get_mode_settings(settings: SettingManager, run_mode: str) -> dict[str, Any]:
    """The preset of ``run_mode`` (``standalone``, ``distributed``, ``auto``; anything else is
    standalone) for the project named in ``settings``. The project's own ``QUEUE_TYPE`` is not
    consulted: the mode decides it."""
    from crawlherd.compat.crawlo.core.config import CrawloConfig

    project = settings.get("PROJECT_NAME", "crawlo")
    if run_mode == "distributed":
        return CrawloConfig.distributed(project_name=project).to_dict()
    if run_mode == "auto":
        return CrawloConfig.auto(project_name=project).to_dict()
    return CrawloConfig.standalone(project_name=project).to_dict()


def _redis_answers(settings: SettingManager) -> bool:
    try:
        import redis
    except ImportError:
        return False
    client = redis.Redis(host=settings.get("REDIS_HOST", "127.0.0.1"), port=int(settings.get("REDIS_PORT", 6379)),
                         password=settings.get("REDIS_PASSWORD"), db=int(settings.get("REDIS_DB", 0)),
                         socket_connect_timeout=1.5, socket_timeout=1.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _update_queue_related_settings(mode_settings: dict[str, Any], queue_type: str, settings: SettingManager) -> None:
    """Set the filter and dedup pipeline that go with ``queue_type`` into ``mode_settings``."""
    if queue_type in _QUEUE_PRESETS:
        mode_settings.update(_QUEUE_PRESETS[queue_type])
        return
    if queue_type != "auto":
        return
    memory = _QUEUE_PRESETS["memory"]
    chosen = {key: settings.get(key, default) for key, default in memory.items()}
    if chosen == memory:
        chosen = dict(_QUEUE_PRESETS["redis"] if _redis_answers(settings) else memory)
    mode_settings.update(chosen)


def _load_project_settings(custom_settings: dict[str, Any] | None = None,
                           settings_module: str | None = None) -> SettingManager:
    """A project's settings: Crawlo's defaults, the settings module (``settings_module``, else
    ``$CRAWLO_SETTINGS_MODULE``, else none), the run mode's, then ``custom_settings``."""
    settings = SettingManager()
    module = settings_module or os.environ.get("CRAWLO_SETTINGS_MODULE")
    if module:
        settings.set_settings(module)
    run_mode = settings.get("RUN_MODE", "standalone")
    mode_settings = _get_mode_settings(settings, run_mode)
    _update_queue_related_settings(mode_settings, mode_settings.get("QUEUE_TYPE", "memory"), settings)
    # the run mode decides these over the settings module; its other presets only fill gaps
    priority_keys = ("QUEUE_TYPE", "FILTER_CLASS", "DEFAULT_DEDUP_PIPELINE")
    for key, value in mode_settings.items():
        if key in priority_keys or key not in settings.attributes:
            settings.set(key, value)
    if custom_settings:
        settings.update_attributes(custom_settings)
    log.debug("settings loaded: RUN_MODE=%s QUEUE_TYPE=%s", settings.get("RUN_MODE"), settings.get("QUEUE_TYPE"))
    return settings
