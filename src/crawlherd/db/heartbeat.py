"""Heartbeats: every long-running process (dispatcher, worker, console) registers itself in
``process_heartbeats`` and beats every ``interval`` seconds; the console shows a process as **gone**
when it has not beaten for :data:`GONE_AFTER` intervals, or as **stopped** when it said goodbye.

A failing beat (database down) is tried again at the next interval: a heartbeat never stops the
process it reports on. Its temporary errors are the config DB's outages
(:class:`~crawlherd.errors.BackendUnavailableError`, ``role="database"``, mapped by
:func:`~crawlherd.db.errors.translate_db_errors`), retried on the resilience kernel's
:class:`~crawlherd._resilience.Attempts` and said once per outage in an
:class:`~crawlherd._resilience.OutageLog` -- the process's own when given (the outage is then said once
with the process's other steps), not a warning per beat. Anything else (a bug) is a warning, and the
next beat comes as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from crawlherd._resilience import Attempts, OutageLog, Retrier, RetryPolicy, Stopped
from crawlherd.db.engine import db_now
from crawlherd.db.errors import translate_db_errors
from crawlherd.db.models import PROCESS_KINDS, ProcessHeartbeat
from crawlherd.errors import BackendUnavailableError, ConfigurationError, summarize

__all__ = ["GONE_AFTER", "Heartbeat", "ProcessInfo", "list_processes", "process_id"]

log = logging.getLogger(__name__)

#: A process that missed this many beats is shown as gone.
GONE_AFTER = 3


def _version() -> str:
    try:
        return version("crawlherd")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
        return "unknown"


def process_id(kind: str) -> str:
    """A unique id for a new process of ``kind``: ``kind:host:pid:random``."""
    return f"{kind}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Heartbeat:
    """Registers a process of ``kind`` (``dispatcher``, ``worker`` or ``web``) and beats every
    ``interval`` seconds while its :meth:`run` task lives; ``jobs_in_hand`` (a callable) is read at
    each beat; ``info`` is stored with it (never put a secret in it), merged at each beat with what
    ``details`` (an async callable, e.g. the worker's frontier counts) returns; ``outages``: the
    process's outage log (a failed beat is then its "config DB" outage; default: the heartbeat's own).
    ``engine`` is the caller's.

    Use as an async context manager (``async with Heartbeat(...):``) or run :meth:`run` as a task.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        kind: str,
        interval: float = 10.0,
        name: str | None = None,
        jobs_in_hand: Callable[[], int] | None = None,
        info: dict[str, Any] | None = None,
        details: Callable[[], Awaitable[dict[str, Any]]] | None = None,
        outages: OutageLog | None = None,
    ) -> None:
        if kind not in PROCESS_KINDS:
            raise ConfigurationError(f"unknown process kind {kind!r}: use one of {', '.join(PROCESS_KINDS)}")
        if not interval > 0:
            raise ConfigurationError(f"heartbeat interval must be > 0 seconds, got {interval!r}")
        self.engine = engine
        self.kind = kind
        self.interval = interval
        self.id = (name or process_id(kind))[:200]
        self.jobs_in_hand = jobs_in_hand or (lambda: 0)
        self.info = dict(info or {})
        self.details = details
        self.outages = outages or OutageLog(log, f"heartbeat {self.id}")
        # A failed beat waits for the next one: the back-off is the interval.
        policy = RetryPolicy(base=interval, cap=interval, jitter=0.0)
        self._retrier = Retrier(self.outages, temporary=(BackendUnavailableError,), policy=policy)
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def register(self) -> None:
        """Insert (or refresh) this process's row."""
        with translate_db_errors("registering a process"):
            await self._register()

    async def _register(self) -> None:
        async with self.engine.begin() as conn:
            now = await db_now(conn)
            exists = (await conn.execute(select(ProcessHeartbeat.id).where(ProcessHeartbeat.id == self.id))).first()
            values = {
                "kind": self.kind,
                "host": socket.gethostname()[:200],
                "pid": os.getpid(),
                "version": _version(),
                "started_at": now,
                "last_seen": now,
                "stopped_at": None,
                "interval_seconds": self.interval,
                "jobs_in_hand": self.jobs_in_hand(),
                "info": self.info,
            }
            if exists:
                await conn.execute(update(ProcessHeartbeat).where(ProcessHeartbeat.id == self.id).values(**values))
            else:
                await conn.execute(insert(ProcessHeartbeat).values(id=self.id, **values))

    async def beat(self, *, stopped: bool = False) -> None:
        """One beat: ``last_seen`` = now, ``jobs_in_hand`` refreshed; ``stopped`` marks a clean exit."""
        values: dict[str, Any] = {"jobs_in_hand": self.jobs_in_hand()}
        if self.details is not None:
            try:  # before the transaction, and bounded: a frontier that hangs must not stop the beats
                async with asyncio.timeout(self.interval):
                    details = await self.details()
                values["info"] = {**self.info, **details}
            except Exception as exc:  # noqa: BLE001 - the frontier down is not the config DB down: beat anyway
                log.debug("heartbeat %s: no details this beat: %s", self.id, summarize(exc))
        with translate_db_errors("beating"):
            async with self.engine.begin() as conn:
                now = await db_now(conn)
                values["last_seen"] = now
                if stopped:
                    values["stopped_at"] = now
                await conn.execute(update(ProcessHeartbeat).where(ProcessHeartbeat.id == self.id).values(**values))

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Register, then beat every ``interval`` seconds until ``stop`` is set (or the task is
        cancelled); on the way out, mark the process stopped."""
        stop = stop or self._stop
        try:
            await self._beats(stop, registered=False)
        finally:
            await asyncio.shield(self._once(lambda: self.beat(stopped=True)))

    async def _beats(self, stop: asyncio.Event, *, registered: bool) -> None:
        """Register (until it worked), then beat every ``interval`` until ``stop``."""
        attempts = self._retrier.attempts("database", stop=stop)
        with contextlib.suppress(Stopped):
            if registered:
                await self._retrier.wait(self.interval, stop)
            while True:
                if not await self._step(self.beat if registered else self.register, attempts):
                    continue  # a temporary failure: Attempts waited the interval
                registered = True
                await self._retrier.wait(self.interval, stop)

    async def _step(self, step: Callable[[], Awaitable[None]], attempts: Attempts) -> bool:
        """``step()``; False after a temporary failure (logged and waited by ``attempts``)."""
        try:
            await step()
        except BackendUnavailableError as exc:  # temporary: the config DB's outage, said once
            await attempts.failed(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - a heartbeat never kills the process it reports on
            log.warning("heartbeat %s: %s", self.id, summarize(exc))
            return True
        attempts.succeeded()
        return True

    async def _once(self, step: Callable[[], Awaitable[None]]) -> bool:
        """``step()`` tried once (the first registration, the last beat); True when it worked."""
        try:
            await step()
        except BackendUnavailableError as exc:
            self.outages.down("database", summarize(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - a heartbeat never kills the process it reports on
            log.warning("heartbeat %s: %s", self.id, summarize(exc))
            return False
        self.outages.up("database")
        return True

    async def __aenter__(self) -> Heartbeat:
        registered = await self._once(self.register)
        self._task = asyncio.create_task(self._beats(self._stop, registered=registered), name=f"heartbeat:{self.id}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self._once(lambda: self.beat(stopped=True))


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A registered process as the console shows it; ``state`` is ``alive``, ``gone`` or ``stopped``."""

    id: str
    kind: str
    host: str
    pid: int
    version: str
    started_at: datetime
    last_seen: datetime
    jobs_in_hand: int
    state: str
    info: dict[str, Any]


async def list_processes(engine: AsyncEngine, *, include_old: bool = False) -> list[ProcessInfo]:
    """Registered processes, newest first; without ``include_old``, those stopped or gone more than a
    day ago are left out."""
    async with engine.connect() as conn:
        now = await db_now(conn)
        hb = ProcessHeartbeat
        stmt = select(*hb.__table__.c).order_by(hb.kind, hb.started_at.desc())
        if not include_old:
            stmt = stmt.where(hb.last_seen >= now - timedelta(days=1))
        rows = (await conn.execute(stmt)).all()
    out = []
    for r in rows:
        if r.stopped_at is not None:
            state = "stopped"
        elif r.last_seen < now - timedelta(seconds=GONE_AFTER * r.interval_seconds):
            state = "gone"
        else:
            state = "alive"
        out.append(
            ProcessInfo(
                r.id, r.kind, r.host, r.pid, r.version, r.started_at, r.last_seen, r.jobs_in_hand, state, r.info
            )
        )
    return out
