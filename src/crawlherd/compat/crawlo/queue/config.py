"""Crawlo's ``QueueConfig`` (``crawlo.queue.config``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from crawlherd.compat.crawlo.queue.queue_types import QueueType
from crawlherd.errors import ConfigurationError

__all__ = ["QueueConfig"]

_POLICIES = ("block", "drop_with_counter", "raise")


class QueueConfig:
    """``QueueConfig(queue_type="auto", redis_url=None, redis_host="127.0.0.1", redis_port=6379,
    redis_password=None, redis_user=None, redis_db=0, queue_name="crawlo:requests", max_queue_size=1000,
    max_retries=3, timeout=300, run_mode=None, settings=None, serialization_format="pickle",
    enqueue_full_policy="drop_with_counter", enqueue_block_timeout=None, enqueue_drop_timeout=50.0, ...)``.

    ``max_queue_size``: requests queued at most; an enqueue beyond waits for room (see
    :class:`~crawlherd.compat.crawlo.queue.queue_manager.QueueManager`). ``enqueue_full_policy``: what
    the scheduler does when that wait times out -- ``drop_with_counter`` (after
    ``enqueue_drop_timeout`` seconds: dropped and counted), ``block`` (wait up to
    ``enqueue_block_timeout``, None for ever, then drop), ``raise`` (``QueueFullTimeout``).
    ``timeout``: seconds a request handed out by a Redis queue may stay unacknowledged before it is
    handed out again (the frontier's lease). Crawlo's back-pressure tuning keywords are accepted and
    kept in :attr:`extra_config`."""

    def __init__(
        self,
        queue_type: QueueType | str = QueueType.AUTO,
        redis_url: str | None = None,
        redis_host: str = "127.0.0.1",
        redis_port: int = 6379,
        redis_password: str | None = None,
        redis_user: str | None = None,
        redis_db: int = 0,
        queue_name: str = "crawlo:requests",
        max_queue_size: int = 1000,
        max_retries: int = 3,
        timeout: int = 300,
        run_mode: str | None = None,
        settings: Any = None,
        serialization_format: str = "pickle",
        enqueue_full_policy: str = "drop_with_counter",
        enqueue_block_timeout: float | None = None,
        enqueue_drop_timeout: float = 50.0,
        **kwargs: Any,
    ) -> None:
        self.queue_type = QueueType.from_string(queue_type) if isinstance(queue_type, str) else queue_type
        if enqueue_full_policy not in _POLICIES:
            raise ConfigurationError(f"enqueue_full_policy={enqueue_full_policy!r}: use one of {_POLICIES}")
        if isinstance(max_queue_size, bool) or not isinstance(max_queue_size, int) or max_queue_size < 1:
            raise ConfigurationError(f"max_queue_size={max_queue_size!r}: must be an int >= 1")
        if redis_url is None:
            auth = ""
            if redis_password:
                auth = f"{quote(redis_user or '', safe='')}:{quote(redis_password, safe='')}@"
            redis_url = f"redis://{auth}{redis_host}:{redis_port}/{redis_db}"
        self.redis_url = redis_url
        self.queue_name = queue_name
        self.max_queue_size = max_queue_size
        self.max_retries = max_retries
        self.timeout = timeout
        self.run_mode = run_mode
        self.settings = settings
        self.serialization_format = serialization_format
        self.enqueue_full_policy = enqueue_full_policy
        self.enqueue_block_timeout = enqueue_block_timeout
        self.enqueue_drop_timeout = enqueue_drop_timeout
        self.extra_config = kwargs

    @classmethod
    def from_settings(cls, settings: Any) -> QueueConfig:
        """From Crawlo settings: ``QUEUE_TYPE``, ``REDIS_URL`` / ``REDIS_HOST`` ..., ``SCHEDULER_QUEUE_NAME``,
        ``SCHEDULER_MAX_QUEUE_SIZE``, ``ENQUEUE_FULL_POLICY``, ``ENQUEUE_BLOCK_TIMEOUT``, ``ENQUEUE_DROP_TIMEOUT``."""
        get = settings.get
        project = get("PROJECT_NAME", "default") or "default"
        return cls(
            queue_type=get("QUEUE_TYPE", "auto") or "auto",
            redis_url=get("REDIS_URL"),
            redis_host=get("REDIS_HOST", "127.0.0.1") or "127.0.0.1",
            redis_port=int(get("REDIS_PORT", 6379) or 6379),
            redis_password=get("REDIS_PASSWORD"),
            redis_db=int(get("REDIS_DB", 0) or 0),
            queue_name=get("SCHEDULER_QUEUE_NAME") or f"crawlo:{project}:queue:requests",
            max_queue_size=int(get("SCHEDULER_MAX_QUEUE_SIZE", 1000) or 1000),
            enqueue_full_policy=get("ENQUEUE_FULL_POLICY", "drop_with_counter") or "drop_with_counter",
            enqueue_block_timeout=get("ENQUEUE_BLOCK_TIMEOUT"),
            enqueue_drop_timeout=float(get("ENQUEUE_DROP_TIMEOUT", 50.0) or 50.0),
            settings=settings,
        )

    def __repr__(self) -> str:
        return (f"QueueConfig(queue_type={self.queue_type.value!r}, queue_name={self.queue_name!r}, "
                f"max_queue_size={self.max_queue_size}, enqueue_full_policy={self.enqueue_full_policy!r})")
