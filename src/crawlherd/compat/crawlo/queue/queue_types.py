"""Crawlo's queue types (``crawlo.queue.queue_types``)."""

from __future__ import annotations

import enum

__all__ = ["QueueType"]


class QueueType(enum.Enum):
    """``memory`` (this process), ``redis`` (shared by processes), ``redis_stream`` (Crawlo's Redis
    Streams queue: here the same Redis frontier as ``redis``), ``auto`` (Redis when it answers, else
    memory), ``disk`` (refused: crawlherd's on-disk frontier is ``sqlite://``)."""

    MEMORY = "memory"
    REDIS = "redis"
    REDIS_STREAM = "redis_stream"
    AUTO = "auto"
    DISK = "disk"

    @classmethod
    def from_string(cls, value: str) -> QueueType:
        wanted = value.lower().strip()
        for member in cls:
            if member.value == wanted:
                return member
        raise ValueError(f"unknown queue type {value!r}: use one of {[m.value for m in cls]}")

    def supports_distributed(self) -> bool:
        return self in (QueueType.REDIS, QueueType.REDIS_STREAM)

    def requires_external_service(self) -> bool:
        return self in (QueueType.REDIS, QueueType.REDIS_STREAM)
