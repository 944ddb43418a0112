"""Schedules as pure functions of the time passed in: interval and cron, with IANA time zones.

Slots are the nominal times a target should run; every slot is a timezone-aware UTC datetime.

**Interval** schedules count *elapsed* time: slots are ``anchor + k * every`` (k any integer; the
anchor defaults to local midnight on 2000-01-01 in the target's time zone). Daylight saving time does
not move them in UTC, so an ``every = "24h"`` target runs at 00:00 local time in winter and at 01:00
in summer (use cron for wall-clock times).

**Cron** schedules are evaluated on the *wall clock* of their time zone (croniter on naive local
times), then converted to UTC:

- a wall-clock time that does not exist (the hour skipped when clocks go forward) runs once at the
  first instant after the gap (``30 2 * * *`` in Europe/Berlin runs at 03:00 CEST on that day); several
  skipped times collapse into that one run;
- a wall-clock time that happens twice (the hour repeated when clocks go back) runs once, at its first
  occurrence (``30 2 * * *`` runs at 02:30 CEST, not again at 02:30 CET).

Cron expressions have five fields (``minute hour day-of-month month day-of-week``) or are one of the
aliases ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight``, ``@hourly``.
When both day-of-month and day-of-week are restricted, a day matches when **either** does, as in
standard (Vixie) cron: ``0 9 1 * 1`` runs on the 1st of every month *and* on every Monday (APScheduler
and Celery require both). Refused, with a message that says why: a field out of range (``61 7 * * *``:
the minute is 0-59), ``R`` (croniter's random value: another slot on every evaluation, so slots and
idempotency keys would not be stable), and an expression that can never fire (``0 0 31 2 *``).

**Misfires** (:func:`plan_slots`): a slot is *late* when the time is more than ``grace`` past it. Slots
that are not late always run. Late slots run according to the target's policy: ``skip`` (none; the
target waits for its next future slot), ``latest`` (only the most recent late slot, and only when no
slot is on time: one run now), ``backfill`` (the most recent ``backfill_limit`` late slots, oldest first).

``next_run_at`` is the next slot (plus the target's jitter), computed from the slot, never from the
moment the dispatcher ran: no drift.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from crawlherd.errors import ScheduleError

__all__ = [
    "CRON_ALIASES",
    "CronSchedule",
    "IntervalSchedule",
    "MisfirePolicy",
    "Schedule",
    "SlotPlan",
    "check_cron",
    "jitter_for",
    "make_schedule",
    "plan_slots",
    "schedule_of",
    "upcoming",
]

MisfirePolicy = Literal["skip", "latest", "backfill"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_MAX_WALK = 10_000  # cron candidates examined for one answer (a DST fold needs at most ~60 x per-minute)


class Schedule(Protocol):
    """A sequence of slots (aware UTC datetimes)."""

    def next_after(self, t: datetime) -> datetime:
        """The first slot strictly after ``t``."""
        ...

    def prev_before(self, t: datetime) -> datetime | None:
        """The last slot strictly before ``t`` (None if there is none)."""
        ...


def _aware(t: datetime, what: str = "time") -> datetime:
    if t.tzinfo is None:
        raise ScheduleError(f"{what} {t!r} is naive: pass an aware datetime")
    return t.astimezone(UTC)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'") from None


def _us(td: timedelta) -> int:
    return (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Slots ``anchor + k * every``; ``every`` is elapsed time (see the module docstring)."""

    every: timedelta
    anchor: datetime = EPOCH

    def __post_init__(self) -> None:
        if self.every <= timedelta(0):
            raise ScheduleError(f"interval must be positive, got {self.every}")
        if _us(self.every) < 1000:
            raise ScheduleError(f"interval must be at least 1 ms, got {self.every}")
        object.__setattr__(self, "anchor", _aware(self.anchor, "anchor"))

    def _index_floor(self, t: datetime) -> int:
        return _us(_aware(t) - self.anchor) // _us(self.every)

    def _slot(self, k: int) -> datetime:
        return self.anchor + timedelta(microseconds=k * _us(self.every))

    def next_after(self, t: datetime) -> datetime:
        return self._slot(self._index_floor(t) + 1)

    def prev_before(self, t: datetime) -> datetime | None:
        return self._slot(-((-_us(_aware(t) - self.anchor)) // _us(self.every)) - 1)


CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
_CRON_FORM = (
    "expected 5 fields 'minute hour day-of-month month day-of-week' (e.g. '30 7 * * 1-5') or @daily/@hourly/..."
)


def check_cron(expression: str) -> str:
    """Validate a cron expression (see the module docstring) and return its five-field form; a
    :class:`ScheduleError` says what is wrong with it."""
    text = " ".join(expression.split())
    expanded = CRON_ALIASES.get(text.lower(), text)
    if expanded.startswith("@"):
        raise ScheduleError(f"unknown cron alias {text!r}: use one of {', '.join(CRON_ALIASES)}")
    fields = expanded.split(" ")
    if len(fields) != 5:
        raise ScheduleError(f"invalid cron expression {expression!r}: {_CRON_FORM}")
    for value, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        _check_cron_field(expression, value, name, low, high, names)
    from croniter import CroniterBadDateError, croniter  # only where there is a cron expression

    if not croniter.is_valid(expanded):
        raise ScheduleError(f"invalid cron expression {expression!r}: {_CRON_FORM}")
    try:
        croniter(expanded, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise ScheduleError(
            f"cron {expression!r} can never fire: no date matches its day-of-month and month "
            "(e.g. 31 February, 31 April)"
        ) from None
    return expanded


def _check_cron_field(expression: str, value: str, name: str, low: int, high: int, names: tuple[str, ...]) -> None:
    if "r" in value.lower() and value.lower() not in names and not any(n in value.lower() for n in names):
        raise ScheduleError(
            f"cron {expression!r}: the {name} {value!r} uses R (random), which gives another slot on every "
            "evaluation; slots and job keys must be stable -- pick a fixed value"
        )
    for part in value.split(","):
        span, _, step = part.partition("/")
        if step and not (step.isdigit() and int(step) >= 1):
            raise ScheduleError(f"cron {expression!r}: the {name} step {step!r} must be a whole number >= 1")
        if span == "*":
            continue
        for bound in span.split("-", 1):
            if bound.isdigit():
                if not low <= int(bound) <= high:
                    raise ScheduleError(f"cron {expression!r}: the {name} {bound} is out of range {low}-{high}")
            elif bound.lower() not in names:
                raise ScheduleError(f"cron {expression!r}: the {name} {bound!r} is not a number from {low} to {high}")


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A five-field cron expression evaluated on the wall clock of ``timezone`` (see the module docstring)."""

    expression: str
    timezone: str = "UTC"
    _cron: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _zone(self.timezone)
        object.__setattr__(self, "_cron", check_cron(self.expression))

    def _to_utc(self, naive: datetime) -> datetime:
        tz = _zone(self.timezone)
        local = naive.replace(tzinfo=tz, fold=0)
        if local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == naive:
            return local.astimezone(UTC)
        # In a gap: the first wall-clock minute that exists after it.
        probe = naive.replace(second=0, microsecond=0)
        for _ in range(24 * 60):
            probe += timedelta(minutes=1)
            candidate = probe.replace(tzinfo=tz, fold=0)
            if candidate.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == probe:
                return candidate.astimezone(UTC)
        raise ScheduleError(f"cannot place {naive} in time zone {self.timezone}")  # pragma: no cover

    def _local(self, t: datetime) -> datetime:
        return _aware(t).astimezone(_zone(self.timezone)).replace(tzinfo=None)

    def next_after(self, t: datetime) -> datetime:
        t = _aware(t)
        # The naive-local -> UTC mapping never decreases and maps local(t) to <= t, so no wall time
        # before local(t) can give a slot after t.
        from croniter import croniter

        it = croniter(self._cron, self._local(t))
        for _ in range(_MAX_WALK):
            slot = self._to_utc(it.get_next(datetime))
            if slot > t:
                return slot
        raise ScheduleError(f"cron {self.expression!r} has no slot after {t}")  # pragma: no cover

    def prev_before(self, t: datetime) -> datetime | None:
        t = _aware(t)
        # In a repeated hour, wall times after local(t) can map before t: start past any fold.
        from croniter import croniter

        it = croniter(self._cron, self._local(t) + timedelta(hours=2))
        for _ in range(_MAX_WALK):
            slot = self._to_utc(it.get_prev(datetime))
            if slot < t:
                # A gap maps several wall times onto one instant and a fold maps none twice, so the
                # first candidate below t is the previous slot.
                return slot
        raise ScheduleError(f"cron {self.expression!r} has no slot before {t}")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """What one tick does for one target: the ``slots`` to dispatch (oldest first) and the next slot."""

    slots: tuple[datetime, ...]
    next_slot: datetime
    skipped: bool = False  # late slots were dropped by the misfire policy


def plan_slots(
    schedule: Schedule,
    *,
    next_slot: datetime,
    now: datetime,
    misfire: MisfirePolicy = "skip",
    backfill_limit: int = 0,
    grace: timedelta = timedelta(seconds=60),
    max_slots: int = 1000,
) -> SlotPlan:
    """The slots due at ``now`` for a target whose next undispatched slot is ``next_slot``.

    Pure: ``now`` is passed in (the dispatcher passes the database's clock). At most ``max_slots``
    on-time slots are returned; when that cap cuts, ``next_slot`` is still due and the next tick goes on.
    """
    next_slot, now = _aware(next_slot, "next_slot"), _aware(now, "now")
    if misfire not in ("skip", "latest", "backfill"):
        raise ScheduleError(f"unknown misfire policy {misfire!r}: use skip, latest or backfill")
    if backfill_limit < 0 or max_slots < 1 or grace < timedelta(0):
        raise ScheduleError("backfill_limit and grace must be >= 0 and max_slots >= 1")
    if next_slot > now:
        return SlotPlan((), next_slot)
    cutoff = now - grace
    # First on-time slot: next_slot itself, or the first slot at or after the cutoff.
    start = next_slot if next_slot >= cutoff else schedule.next_after(cutoff - _US)
    on_time: list[datetime] = []
    slot = start
    while slot <= now and len(on_time) < max_slots:
        on_time.append(slot)
        slot = schedule.next_after(slot)
    following = slot
    late: list[datetime] = []
    if next_slot < start:
        want = {"skip": 0, "latest": 0 if on_time else 1, "backfill": backfill_limit}[misfire]
        candidate = schedule.prev_before(start)
        while candidate is not None and candidate >= next_slot and len(late) < want:
            late.append(candidate)
            candidate = schedule.prev_before(candidate)
        late.reverse()
        skipped = candidate is not None and candidate >= next_slot
        return SlotPlan((*late, *on_time), following, skipped)
    return SlotPlan(tuple(on_time), following)


def upcoming(schedule: Schedule, *, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` slots strictly after ``after`` (for ``targets preview``)."""
    slots: list[datetime] = []
    t = after
    for _ in range(count):
        t = schedule.next_after(t)
        slots.append(t)
    return slots


def jitter_for(key: str, max_jitter: timedelta) -> timedelta:
    """A deterministic offset in ``[0, max_jitter)`` derived from ``key`` (whole milliseconds): the same
    target always gets the same jitter, on every machine and after every restart."""
    max_ms = _us(max_jitter) // 1000
    if max_ms <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % max_ms)


def make_schedule(
    *,
    kind: str,
    interval_seconds: float | None = None,
    cron: str | None = None,
    timezone: str = "UTC",
    anchor_at: datetime | None = None,
) -> Schedule:
    """The schedule stored in a ``scrape_targets`` row."""
    if kind == "interval":
        if interval_seconds is None:
            raise ScheduleError("interval schedule without interval_seconds")
        # Without an explicit anchor, slots count from local midnight, 2000-01-01, in the target's zone:
        # "every 6h" in Europe/Berlin runs at 00:00, 06:00, ... CET.
        anchor = anchor_at or datetime(2000, 1, 1, tzinfo=_zone(timezone))
        return IntervalSchedule(timedelta(seconds=interval_seconds), anchor)
    if kind == "cron":
        if not cron:
            raise ScheduleError("cron schedule without an expression")
        return CronSchedule(cron, timezone)
    raise ScheduleError(f"unknown schedule kind {kind!r}: use interval or cron")


def schedule_of(row: Any) -> Schedule:
    """The schedule of a ``scrape_targets`` row (an ORM object or a result row with its columns)."""
    return make_schedule(
        kind=row.schedule_kind,
        interval_seconds=row.interval_seconds,
        cron=row.cron,
        timezone=row.timezone,
        anchor_at=row.anchor_at,
    )
