"""Lineage, and "why didn't target X run at T?".

:func:`lineage` follows a target's slots through every hand: schedule -> slot -> claimed by (which
dispatcher, when) -> outbox (publish attempts, last error) -> published (when, by which relay, to which
broker) -> the worker that took it -> each attempt -> outcome. :func:`explain` picks the slot that
should have run at a time ``T`` and says, in one verdict, what became of it:

============================ ======================================================================
verdict                      meaning
============================ ======================================================================
``ran``                      it did run (succeeded)
``inactive``                 the target is disabled
``not_due``                  no slot of the schedule falls before ``T`` (next run at ...)
``skipped_by_misfire``       the slot was claimed too late and dropped by the misfire policy
``not_claimed``              due, but no dispatcher claimed it (none alive, or not yet)
``in_outbox``                claimed moments ago (under :data:`OUTBOX_PATIENCE`), the relay is alive:
                             it is being published (no alarm)
``stuck_in_outbox``          claimed, but the broker has not confirmed it (broker failing since ...,
                             no relay alive, or waiting longer than :data:`OUTBOX_PATIENCE`)
``waiting_for_worker``       published, no worker has taken it yet (no worker alive?)
``running``                  a worker is on it now
``politeness``               a worker is on it, and its pages wait in the frontier on the website's
                             politeness: min_delay (or Crawl-delay), max_concurrency, a Retry-After
``worker_lost``              a worker took it and stopped beating
``retrying``                 an attempt failed; the next one is scheduled
``dead``                     every attempt failed (reason)
``requeued``                 a dead job sent again by an operator, not yet taken
============================ ======================================================================

The page and ``crawlherd explain`` call the same function.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from crawlherd._redact import redact_url
from crawlherd.console.jobs import AttemptInfo, details_in
from crawlherd.db.engine import db_now
from crawlherd.db.heartbeat import ProcessInfo, list_processes
from crawlherd.db.models import DispatchOutbox, JobAttempt, JobRun, ManualRun, OutboxTrail, ScrapeTarget, Website
from crawlherd.dispatch.schedule import schedule_of
from crawlherd.dispatch.targets import TARGET_ROWS
from crawlherd.errors import CrawlherdError
from crawlherd.frontier.base import HostState
from crawlherd.url import canonicalize

__all__ = ["OUTBOX_PATIENCE", "VERDICTS", "Explanation", "Lineage", "SlotTrail", "explain", "lineage"]

#: How long a claimed slot may wait in the outbox, with a relay alive and no publish error, before the
#: verdict calls it stuck: a slot claimed seconds ago (a "Run now" just clicked) is no alarm.
OUTBOX_PATIENCE = timedelta(seconds=30)

VERDICTS = (
    "ran",
    "inactive",
    "not_due",
    "skipped_by_misfire",
    "not_claimed",
    "in_outbox",
    "stuck_in_outbox",
    "waiting_for_worker",
    "running",
    "politeness",
    "worker_lost",
    "retrying",
    "dead",
    "requeued",
)


def _ts(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC") if t else "-"


@dataclass(frozen=True, slots=True)
class SlotTrail:
    """One slot of a target, through every hand it passed."""

    slot_at: datetime
    manual_by: str | None
    claimed_at: datetime
    claimed_by: str | None
    outbox_status: str
    publish_attempts: int
    last_error: str | None
    published_at: datetime | None
    published_by: str | None
    broker: str | None
    run_id: int | None = None
    run_status: str | None = None
    run_attempts: int = 0
    worker: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    pages: int = 0
    items_new: int = 0
    items_updated: int = 0
    #: When the running attempt's listing ended; the run's detail pages still out, and failed.
    listed_at: datetime | None = None
    details_out: int = 0
    details_failed: int = 0
    attempts: list[AttemptInfo] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif name == "attempts":
                value = [
                    {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in vars_of(a).items()}
                    for a in value
                ]
            out[name] = value
        return out


def vars_of(obj: Any) -> dict[str, Any]:
    """The fields of a slotted dataclass."""
    return {name: getattr(obj, name) for name in obj.__slots__}


@dataclass(frozen=True, slots=True)
class Lineage:
    """A target and its latest slots (newest first)."""

    target_id: int
    website: str
    keywords: str
    location: str
    active: bool
    next_run_at: datetime
    slots: list[SlotTrail]


@dataclass(frozen=True, slots=True)
class Explanation:
    """The answer to "why didn't target X run at T?": a ``verdict`` (see :data:`VERDICTS`), one
    sentence, and the slot it is about (None when no slot was written)."""

    target_id: int
    at: datetime
    verdict: str
    summary: str
    slot: SlotTrail | None = None
    expected_slot: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_id": self.target_id,
            "at": self.at.isoformat(),
            "verdict": self.verdict,
            "summary": self.summary,
            "expected_slot": self.expected_slot.isoformat() if self.expected_slot else None,
            "slot": self.slot.as_dict() if self.slot else None,
        }


def _slots_query(target_id: int) -> Any:
    ob, tr, R, M = DispatchOutbox, OutboxTrail, JobRun, ManualRun  # noqa: N806
    return (
        select(
            ob.slot_at, M.requested_by, ob.created_at, tr.claimed_by, ob.status, ob.attempts, ob.last_error,
            ob.published_at, tr.published_by, tr.broker, R.id, R.status, R.attempts, R.worker, R.started_at,
            R.finished_at, R.error, R.pages, R.items_new, R.items_updated, R.listed_at, details_in("out"),
            details_in("failed"),
        )
        .select_from(ob)
        .outerjoin(tr, tr.outbox_id == ob.id)
        .outerjoin(M, (M.target_id == ob.target_id) & (M.slot_at == ob.slot_at))
        .outerjoin(R, (R.target_id == ob.target_id) & (R.slot_at == ob.slot_at))
        .where(ob.target_id == target_id)
    )


async def _trails(conn: AsyncConnection, rows: list[Any], target_id: int) -> list[SlotTrail]:
    if not rows:
        return []
    A = JobAttempt  # noqa: N806
    slots = [r[0] for r in rows]
    attempts: dict[datetime, list[AttemptInfo]] = {}
    for a in (
        await conn.execute(
            select(
                A.slot_at, A.attempt, A.worker, A.status, A.started_at, A.finished_at, A.pages, A.items_new,
                A.items_updated, A.error,
            )
            .where(A.target_id == target_id, A.slot_at.in_(slots))
            .order_by(A.slot_at, A.started_at, A.attempt)
        )
    ).all():
        values = list(a)[1:]
        values[-1] = redact_url(values[-1]) if values[-1] else None
        values[0] = len(attempts.get(a[0], [])) + 1  # every attempt in order, a dead job's retries included
        attempts.setdefault(a[0], []).append(AttemptInfo(*values))
    out = []
    for r in rows:
        values = list(r)
        if values[12] is None:
            values[12] = 0
        for i in (17, 18, 19, 21, 22):
            values[i] = values[i] or 0
        for i in (6, 16):  # last publish error, job error: they may quote a URL
            values[i] = redact_url(values[i]) if values[i] else values[i]
        out.append(SlotTrail(*values, attempts=attempts.get(r[0], [])))  # type: ignore[misc]
    return out


async def _target(conn: AsyncConnection, target_id: int) -> Any:
    stmt = TARGET_ROWS.add_columns(Website.spec.label("website_spec")).where(ScrapeTarget.id == target_id)
    row = (await conn.execute(stmt)).first()
    if row is None:
        raise CrawlherdError(f"no scrape target with id {target_id} (see `crawlherd targets list`)")
    return row


async def lineage(
    engine: AsyncEngine, target_id: int, *, limit: int = 20, before: datetime | None = None
) -> Lineage:
    """``target_id``'s latest ``limit`` slots (before ``before``), newest first, each with its trail."""
    async with engine.connect() as conn:
        t = await _target(conn, target_id)
        q = _slots_query(target_id).order_by(DispatchOutbox.slot_at.desc()).limit(limit)
        if before is not None:
            q = q.where(DispatchOutbox.slot_at < before)
        trails = await _trails(conn, list((await conn.execute(q)).all()), target_id)
    return Lineage(t.id, t.website_name, t.keywords, t.location, t.active, t.next_run_at, trails)


def _alive(processes: list[ProcessInfo], kind: str) -> list[ProcessInfo]:
    return [p for p in processes if p.kind == kind and p.state == "alive"]


def _last_seen(processes: list[ProcessInfo], kind: str) -> str:
    seen = [p.last_seen for p in processes if p.kind == kind]
    return f" (the last one was seen at {_ts(max(seen))})" if seen else " (none has ever registered)"


async def explain(engine: AsyncEngine, target_id: int, at: datetime | None = None) -> Explanation:
    """Why target ``target_id`` did (or did not) run at ``at`` (default: now, database clock)."""
    async with engine.connect() as conn:
        now = await db_now(conn)
        when = at or now
        t = await _target(conn, target_id)
        jitter = timedelta(milliseconds=t.jitter_ms)
        try:
            expected = schedule_of(t).prev_before(when - jitter + timedelta(microseconds=1))
        except CrawlherdError:
            expected = None
        row = (
            await conn.execute(
                _slots_query(target_id).where(DispatchOutbox.slot_at <= when).order_by(DispatchOutbox.slot_at.desc())
                .limit(1)
            )
        ).first()
        trail = (await _trails(conn, [row], target_id))[0] if row is not None else None
        failing_since = (
            await conn.execute(
                select(func.min(DispatchOutbox.created_at)).where(
                    DispatchOutbox.status == "pending", DispatchOutbox.last_error.is_not(None)
                )
            )
        ).scalar_one_or_none()
    processes = await list_processes(engine, include_old=True)

    def answer(verdict: str, summary: str, slot: SlotTrail | None = None) -> Explanation:
        return Explanation(target_id, when, verdict, summary, slot, expected)

    if trail is not None and (expected is None or trail.slot_at >= expected):
        return _explain_slot(trail, processes, failing_since, answer, _site_hosts(t.website_spec), now)
    if not t.active:
        return answer("inactive", f"target {target_id} is disabled (since {_ts(t.updated_at)}): no slot is dispatched")
    if expected is None or t.created_at > expected + jitter:
        return answer("not_due", f"no run was due by {_ts(when)}: the next run is at {_ts(t.next_run_at)}")
    if t.next_run_at > expected + jitter:
        grace = f"{t.misfire_grace_seconds:g}s"
        return answer(
            "skipped_by_misfire",
            f"the slot {_ts(expected)} was claimed after its misfire grace ({grace}) and dropped by the misfire "
            f"policy {t.misfire_policy!r}; the next run is at {_ts(t.next_run_at)}",
        )
    if when > now:
        return answer("not_due", f"{_ts(when)} is still to come: the next run is at {_ts(t.next_run_at)}")
    dispatchers = _alive(processes, "dispatcher")
    if not dispatchers:
        return answer(
            "not_claimed",
            f"due since {_ts(t.next_run_at)} but not claimed: no dispatcher is alive"
            + _last_seen(processes, "dispatcher"),
        )
    return answer(
        "not_claimed",
        f"due since {_ts(t.next_run_at)}, not claimed yet by the {len(dispatchers)} dispatcher(s) alive",
    )


_Answer = Callable[..., Explanation]


def _site_hosts(spec: dict[str, Any]) -> set[str]:
    """The frontier's host keys of a website: those of its base URL and of its search URL."""
    hosts = set()
    for key in ("base_url", "search_url_template"):
        with contextlib.suppress(ValueError, CrawlherdError, TypeError):
            hosts.add(canonicalize(str(spec[key]))[1])
    return hosts


def _politeness_hold(hosts: set[str], worker: ProcessInfo, processes: list[ProcessInfo]) -> str | None:
    """How the website's politeness holds its pages in a frontier, as the job's worker (then any
    other live worker: a shared frontier) last reported it; None when it does not."""
    for p in [worker, *(p for p in _alive(processes, "worker") if p.id != worker.id)]:
        states = p.info.get("frontier", {}).get("host_states", {})
        for host in sorted(hosts & states.keys()):
            st = HostState.from_summary(states[host])
            if st is None or not st.held:
                continue
            if st.blocked:
                why = f"{host} backs off for {st.backoff:.0f}s more (a Retry-After or rate-limit answer)"
            elif st.ready_in > 0:
                why = f"{host} waits {st.ready_in:.1f}s more for its delay of {st.delay:g}s between fetches (min_delay)"
            else:
                why = f"{host} has {st.in_flight} page(s) in flight, its max_concurrency of {st.max_in_flight}"
            return f"{why}; {st.queued} page(s) queued (frontier of {p.id} at {_ts(p.last_seen)})"
    return None


def _explain_slot(
    s: SlotTrail, processes: list[ProcessInfo], failing_since: datetime | None, answer: _Answer, hosts: set[str],
    now: datetime,
) -> Explanation:
    """What became of slot ``s``, by the last hand it reached: the outbox, the broker, a worker."""
    head = f"slot {_ts(s.slot_at)}" + (f" (run now by {s.manual_by})" if s.manual_by else "")
    if s.run_status == "queued":
        where = "waits in the outbox for the relay" if s.outbox_status == "pending" else "no worker has taken it yet"
        return answer("requeued", f"{head} was dead and has been sent again; it {where}", s)
    if s.outbox_status == "pending":
        return _explain_outbox(s, head, processes, failing_since, answer, now)
    if s.run_status is None:
        published = f"published at {_ts(s.published_at)}" + (f" to {s.broker}" if s.broker else "")
        workers = _alive(processes, "worker")
        extra = (
            f"; {len(workers)} worker(s) alive"
            if workers
            else f"; no worker is alive{_last_seen(processes, 'worker')}"
        )
        return answer("waiting_for_worker", f"{head} was {published}, not taken by a worker yet{extra}", s)
    if s.run_status == "running":
        return _explain_running(s, head, processes, answer, hosts)
    if s.run_status == "failed":
        return answer(
            "retrying", f"{head}: attempt {s.run_attempts} failed at {_ts(s.finished_at)} ({s.error}); a retry is "
            "scheduled after a back-off", s,
        )
    if s.run_status == "dead":
        return answer("dead", f"{head} is dead after {s.run_attempts} attempt(s): {s.error}", s)
    return answer(
        "ran",
        f"{head} ran: succeeded at {_ts(s.finished_at)} on {s.worker} ({s.pages} page(s), {s.items_new} new and "
        f"{s.items_updated} updated item(s))"
        + (f"; {s.details_failed} detail page(s) failed (`crawlherd jobs show {s.run_id}`)"
           if s.details_failed else ""),
        s,
    )


def _explain_outbox(
    s: SlotTrail, head: str, processes: list[ProcessInfo], failing_since: datetime | None, answer: _Answer,
    now: datetime,
) -> Explanation:
    """A slot claimed but not yet confirmed by the broker: the broker failing, or the relay not there."""
    claimed = f"claimed by {s.claimed_by or 'a dispatcher'} at {_ts(s.claimed_at)}"
    if s.last_error:
        since = f" since {_ts(failing_since)}" if failing_since else ""
        return answer(
            "stuck_in_outbox",
            f"{head} was {claimed} but is stuck in the outbox: the broker has been failing{since} "
            f"({s.publish_attempts} publish attempt(s); last error: {s.last_error})",
            s,
        )
    relays = _alive(processes, "dispatcher")
    if relays and now - s.claimed_at < OUTBOX_PATIENCE:
        return answer("in_outbox", f"{head} was {claimed}; the relay is publishing it", s)
    extra = "" if relays else f"; no dispatcher (relay) is alive{_last_seen(processes, 'dispatcher')}"
    return answer("stuck_in_outbox", f"{head} was {claimed} and waits in the outbox for the relay{extra}", s)


def _explain_running(
    s: SlotTrail, head: str, processes: list[ProcessInfo], answer: _Answer, hosts: set[str]
) -> Explanation:
    """A slot a worker took and has not finished: the worker lost, the website's politeness holding its
    pages, or simply running."""
    beat = next((p for p in processes if p.id == s.worker), None)
    if beat is not None and beat.state != "alive":
        return answer(
            "worker_lost",
            f"{head} was taken by worker {s.worker} at {_ts(s.started_at)}, which stopped beating at "
            f"{_ts(beat.last_seen)}: the broker redelivers the job when its delivery times out",
            s,
        )
    running = f"{head} is running on worker {s.worker} since {_ts(s.started_at)}"
    if s.listed_at is not None:
        running += f", listing done at {_ts(s.listed_at)}, {s.details_out} detail page(s) still out"
    held = _politeness_hold(hosts, beat, processes) if beat is not None else None
    if held:
        return answer("politeness", f"{running}, its pages held by the website's politeness: {held}", s)
    return answer("running", running, s)
