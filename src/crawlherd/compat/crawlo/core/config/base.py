"""Crawlo's run modes and their presets (``crawlo.core.config.base``).

``standalone``: a memory queue and filter in one process. ``distributed``: Redis for both, shared by
every process (Crawlo's ``redis_stream`` queue type is crawlherd's Redis frontier), more concurrency.
``auto``: the standalone preset with ``QUEUE_TYPE = "auto"`` (Redis if it answers when the queue opens).
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["BASE_CONFIG", "MODE_CONFIG_MAP", "RunMode"]


class RunMode(enum.Enum):
    STANDALONE = "standalone"
    DISTRIBUTED = "distributed"
    AUTO = "auto"


#: What every mode starts from.
BASE_CONFIG: dict[str, Any] = {
    "PROJECT_NAME": "crawlo",
    "CONCURRENCY": 8,
    "MAX_RUNNING_SPIDERS": 3,
    "DOWNLOAD_DELAY": 0.5,
    "DOWNLOAD_TIMEOUT": 15,
    "MAX_RETRY_TIMES": 3,
    "CONNECTION_POOL_LIMIT": 100,
    "LOG_LEVEL": "INFO",
}

#: Each mode's settings over :data:`BASE_CONFIG`.
MODE_CONFIG_MAP: dict[str, dict[str, Any]] = {
    "standalone": {
        "RUN_MODE": "standalone",
        "QUEUE_TYPE": "memory",
        "FILTER_CLASS": "crawlo.filters.MemoryFilter",
        "DEFAULT_DEDUP_PIPELINE": "crawlo.pipelines.MemoryDedupPipeline",
    },
    "distributed": {
        "RUN_MODE": "distributed",
        "QUEUE_TYPE": "redis_stream",
        "FILTER_CLASS": "crawlo.filters.AioRedisFilter",
        "DEFAULT_DEDUP_PIPELINE": "crawlo.pipelines.RedisDedupPipeline",
        "CONCURRENCY": 16,
        "MAX_RUNNING_SPIDERS": 10,
    },
}
