"""crawlherd in a Celery stack (``pip install 'crawlherd[celery]'``; see docs/integrations.md#celery).

- Task ``crawlherd.dispatch``: one dispatch cycle (what ``crawlherd dispatch --once`` does), for Celery
  beat; :func:`beat_schedule` is the entry to put in ``app.conf.beat_schedule``.
- Jobs as Celery tasks: the broker URL ``celery+<Celery broker URL>[?queue=celery]`` makes the dispatcher
  publish every job message as a task ``crawlherd.run_job`` (Celery's message protocol, sent by Celery
  itself), with a task id derived from the job's idempotency key; a Celery worker that imports this
  module runs it with crawlherd's worker code (idempotency check, crawl, items, retry with a growing
  delay as a new task with a countdown, dead after ``max_attempts``, all recorded in ``job_runs``).

The tasks read crawlherd's settings in the Celery worker (``CRAWLHERD_*`` environment or
``crawlherd.toml``); ``CRAWLHERD_BROKER_URL`` is what the dispatch task publishes to.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from celery import Celery, shared_task
from celery.exceptions import Reject
from kombu.exceptions import OperationalError

from crawlherd._redact import redact_url
from crawlherd.brokers._common import check_delay, check_publish, unavailable
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.contrib.cycle import run_dispatch_cycle
from crawlherd.errors import BrokerError, ConfigurationError, PublishError

__all__ = ["TASK_DISPATCH", "TASK_RUN_JOB", "CeleryTaskBroker", "beat_schedule", "dispatch", "run_job"]

log = logging.getLogger("crawlherd.contrib.celery")

TASK_DISPATCH = "crawlherd.dispatch"
TASK_RUN_JOB = "crawlherd.run_job"
_JOB_NAMESPACE = uuid.UUID("5b0f4a8e-2f7c-4d1e-9a43-6f1c2d3e4b5a")


def beat_schedule(*, every: float = 60.0, name: str = "crawlherd-dispatch") -> dict[str, dict[str, Any]]:
    """The beat entry that runs a dispatch cycle every ``every`` seconds (a cycle that is still queued
    when the next one is due expires: cycles never pile up behind a stopped worker)."""
    if not (isinstance(every, int | float) and math.isfinite(every) and every > 0):
        raise ConfigurationError(f"beat_schedule(every={every!r}): must be a number of seconds > 0")
    return {name: {"task": TASK_DISPATCH, "schedule": float(every), "options": {"expires": float(every)}}}


def job_task_id(key: str) -> str:
    """The Celery task id of the job with idempotency key ``key`` (the same on every re-publish)."""
    return str(uuid.uuid5(_JOB_NAMESPACE, key))


@shared_task(name=TASK_DISPATCH, ignore_result=True)  # type: ignore[untyped-decorator]
def dispatch(batch_size: int = 500) -> dict[str, Any]:
    """One dispatch cycle with the worker's crawlherd settings; returns what it did."""
    result = run_dispatch_cycle(batch_size=batch_size).as_dict()
    log.info("crawlherd dispatch cycle: %s", result)
    return result


# -- publishing jobs as Celery tasks -------------------------------------------------------------


class _NoDeadLetterQueue:
    """A Celery broker keeps no dead letters of its own: dead jobs are the runs with status ``dead``
    (``crawlherd jobs dead``), and its queue length is Celery's to tell."""

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return []

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        return 0

    async def pending(self) -> int:
        return 0

    @property
    def lease(self) -> float | None:
        """None: nothing here runs out (a Celery task's message is Celery's to hold, ``acks_late``)."""
        return None


class CeleryTaskBroker(_NoDeadLetterQueue):
    """``celery+amqp://...``: publishes job messages as ``crawlherd.run_job`` Celery tasks; never consumes.

    Options: ``queue`` (the Celery queue, ``celery``), ``publish_timeout`` (seconds, 10). ``app=``: a live
    Celery app to send with (its broker settings are used; it is not closed). Without it, a private app
    on the URL's broker is made, with publisher confirms on (RabbitMQ).
    """

    backend = "celery"

    def __init__(self, url: str, *, app: Celery | None = None, queue: str = "celery",
                 publish_timeout: float = 10.0) -> None:
        if not queue:
            raise ConfigurationError("celery broker option queue: must not be empty")
        if not (math.isfinite(publish_timeout) and publish_timeout > 0):
            raise ConfigurationError(f"celery broker option publish_timeout={publish_timeout!r}: must be > 0")
        scheme = urlsplit(url).scheme
        if not scheme.startswith("celery+"):
            raise ConfigurationError(f"celery broker URL {redact_url(url)!r}: use celery+<Celery broker URL>, "
                                     "e.g. celery+amqp://guest:guest@127.0.0.1:5672//")
        self.broker_url = url[len("celery+"):]
        self.queue = queue
        self.publish_timeout = publish_timeout
        self._given_app = app
        self._app: Celery | None = None
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, app: Celery | None = None, **options: Any) -> CeleryTaskBroker:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        known = {"queue", "publish_timeout"}
        for name in [*query, *options]:
            if name not in known:
                raise ConfigurationError(f"unknown celery broker option {name!r}; known options: "
                                         f"{', '.join(sorted(known))}")
        merged: dict[str, Any] = {**query, **options}
        if "publish_timeout" in merged:
            try:
                merged["publish_timeout"] = float(merged["publish_timeout"])
            except ValueError:
                raise ConfigurationError(f"celery broker option publish_timeout={merged['publish_timeout']!r} "
                                         "is not a number") from None
        bare = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode([]), parts.fragment))
        return cls(bare, app=app, **merged)

    def __repr__(self) -> str:
        return f"<CeleryTaskBroker {redact_url(self.broker_url)} queue={self.queue!r}>"

    async def __aenter__(self) -> CeleryTaskBroker:
        if self._closed:
            raise BrokerError(f"{self!r} is closed")
        if self._app is None:
            if self._given_app is not None:
                self._app = self._given_app
            else:
                app = Celery("crawlherd-publisher", broker=self.broker_url, set_as_current=False)
                app.conf.broker_transport_options = {"confirm_publish": True}
                app.conf.broker_connection_retry_on_startup = False
                self._app = app
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        """Send the task and return once the broker took it (publisher confirm on RabbitMQ)."""
        await self.send(body, key=key, headers=headers, delay=delay, task_id=job_task_id(key))

    async def send(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None, delay: float = 0.0,
                   task_id: str | None = None, queue: str | None = None) -> None:
        """Send ``body`` as a ``crawlherd.run_job`` task (``task_id`` default: a fresh one)."""
        hdrs = check_publish(body, key, headers, delay)
        await self.__aenter__()
        app = self._app
        assert app is not None
        try:
            text, encoding = bytes(body).decode(), ""
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(bytes(body)).decode(), "base64"

        def send() -> None:
            app.send_task(TASK_RUN_JOB, args=[text, key], kwargs={"headers": hdrs, "encoding": encoding},
                          task_id=task_id or str(uuid.uuid4()), queue=queue or self.queue,
                          countdown=delay or None, retry=True,
                          retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5})

        try:
            async with asyncio.timeout(self.publish_timeout * 3):
                await asyncio.to_thread(send)
        except (OperationalError, OSError, TimeoutError) as exc:
            raise unavailable(f"{self!r}: the Celery broker cannot be reached: {exc}", backend="celery") from exc
        except Exception as exc:
            raise PublishError(f"{self!r}: the task was not sent: {exc}") from exc

    async def consume(self, *, prefetch: int = 10) -> AsyncGenerator[Delivery, None]:
        raise BrokerError(f"{self!r} only publishes: Celery workers consume crawlherd.run_job tasks")
        yield  # pragma: no cover - makes this an async generator

    async def ack(self, delivery: Delivery) -> None:
        raise BrokerError(f"{self!r} delivers nothing to settle")

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        raise BrokerError(f"{self!r} delivers nothing to settle")

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        raise BrokerError(f"{self!r} delivers nothing to settle")

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        raise BrokerError(f"{self!r} delivers nothing to settle")

    async def touch(self, delivery: Delivery) -> None:
        raise BrokerError(f"{self!r} delivers nothing to extend")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        app, self._app = self._app, None
        if app is not None and app is not self._given_app:
            await asyncio.to_thread(app.close)


# -- running a job inside a Celery worker ---------------------------------------------------------


class _TaskBroker(_NoDeadLetterQueue):
    """The broker side of one ``crawlherd.run_job`` task: settling the task's single delivery."""

    backend = "celery-task"

    def __init__(self, sender: CeleryTaskBroker, queue: str) -> None:
        self.sender = sender
        self.queue = queue
        self.outcome = ""
        self.reason = ""

    async def __aenter__(self) -> _TaskBroker:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        await self.sender.send(body, key=key, headers=headers, delay=delay, queue=self.queue)

    async def consume(self, *, prefetch: int = 10) -> AsyncGenerator[Delivery, None]:
        raise BrokerError("a crawlherd.run_job task has one delivery; nothing to consume")
        yield  # pragma: no cover

    def _settle(self, outcome: str, reason: str = "") -> None:
        if self.outcome:
            raise BrokerError(f"the task's delivery was settled already ({self.outcome})")
        self.outcome, self.reason = outcome, reason

    async def ack(self, delivery: Delivery) -> None:
        self._settle("done")

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        self._settle("requeue" if requeue else "dead", "" if requeue else "nacked")

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        check_delay(delay)
        await self.sender.send(delivery.body if body is None else body, key=delivery.key,
                               headers=delivery.headers, delay=delay, queue=self.queue)
        self._settle("retried")

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        self._settle("dead", reason)

    async def touch(self, delivery: Delivery) -> None:
        """Nothing to extend (Celery holds the task's message until the task returns); BrokerError once
        the delivery was settled."""
        if self.outcome:
            raise BrokerError(f"the task's delivery was settled already ({self.outcome})")

    async def close(self) -> None:
        return None


async def _run_job(app: Celery, body: bytes, key: str, headers: Mapping[str, str], task_id: str,
                   queue: str) -> _TaskBroker:
    from crawlherd.db import create_engine
    from crawlherd.fetch.base import FetchLimits
    from crawlherd.settings import load_settings
    from crawlherd.worker.worker import Worker, WorkerOptions

    settings = load_settings()
    engine = create_engine(settings.database_url)
    sender = CeleryTaskBroker(f"celery+{app.conf.broker_url or 'memory://'}", app=app, queue=queue)
    broker = _TaskBroker(sender, queue)
    try:
        limits = FetchLimits(allow_private_addresses=settings.allow_private_addresses, user_agent=settings.user_agent)
        worker = Worker(
            engine,
            broker,
            WorkerOptions(
                concurrency=1,
                limits=limits,
                frontier_url=settings.effective_frontier_url,
                name=f"celery:{task_id}",
            ),
        )
        async with worker:
            await worker.process(Delivery(body, key, task_id, headers=dict(headers)))
    finally:
        await engine.dispose()
    return broker


@shared_task(name=TASK_RUN_JOB, bind=True, acks_late=True, ignore_result=True, max_retries=None)  # type: ignore[untyped-decorator]
def run_job(self: Any, body: str, key: str, headers: Mapping[str, str] | None = None, encoding: str = "") -> str:
    """Run one crawlherd job message (sent by the ``celery+...`` broker) with crawlherd's worker code.

    Returns ``done`` or ``retried`` (a new task was sent with a countdown); a job that is dead (or an
    invalid message) is rejected without requeue (a dead-letter exchange on the queue catches it; the
    run is recorded as ``dead`` in ``job_runs``). A failure of the worker itself (database down...) retries
    the task.
    """
    raw = base64.b64decode(body) if encoding == "base64" else body.encode()
    queue = (self.request.delivery_info or {}).get("routing_key") or "celery"
    try:
        broker = asyncio.run(_run_job(self.app, raw, key, headers or {}, str(self.request.id), queue))
    except Exception as exc:  # a service failure or a bug: the job is tried again, never lost
        log.exception("crawlherd.run_job %s failed; retried", key)
        raise self.retry(exc=exc, countdown=5) from exc
    if broker.outcome == "dead":
        raise Reject(broker.reason, requeue=False)
    if broker.outcome == "requeue":
        raise self.retry(countdown=1)
    return broker.outcome


if TYPE_CHECKING:
    _conforms: type[Broker] = CeleryTaskBroker
    _conforms_too: type[Broker] = _TaskBroker
