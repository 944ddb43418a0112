"""Schedules: interval and cron, time zones across DST, misfire policies, jitter (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlherd.dispatch.schedule import CronSchedule, IntervalSchedule, jitter_for, make_schedule, plan_slots, upcoming
from crawlherd.duration import format_duration, parse_duration
from crawlherd.errors import ScheduleError

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_interval_slots_are_anchored() -> None:
    s = IntervalSchedule(timedelta(minutes=15), utc(2026, 1, 1, 0, 5))
    assert s.next_after(utc(2026, 1, 1, 10, 0)) == utc(2026, 1, 1, 10, 5)
    assert s.next_after(utc(2026, 1, 1, 10, 5)) == utc(2026, 1, 1, 10, 20)  # strictly after
    assert s.prev_before(utc(2026, 1, 1, 10, 5)) == utc(2026, 1, 1, 9, 50)  # strictly before
    assert s.prev_before(utc(2026, 1, 1, 10, 6)) == utc(2026, 1, 1, 10, 5)
    assert s.next_after(utc(2025, 12, 31, 23, 59)) == utc(2026, 1, 1, 0, 5)  # before the anchor too


def test_interval_counts_elapsed_time_across_dst() -> None:
    # Default anchor: local midnight 2000-01-01 in the zone. 24h of elapsed time: 00:00 CET in winter,
    # 01:00 CEST after the spring change (documented).
    s = make_schedule(kind="interval", interval_seconds=86400, timezone="Europe/Berlin")
    before, after = (
        upcoming(s, after=utc(2026, 3, 27, 12), count=3)[0],
        upcoming(s, after=utc(2026, 3, 30, 12), count=1)[0],
    )
    assert before.astimezone(BERLIN).hour == 0
    assert after.astimezone(BERLIN).hour == 1
    slots = upcoming(s, after=utc(2026, 3, 27, 12), count=4)
    assert all(b - a == timedelta(days=1) for a, b in zip(slots, slots[1:], strict=False))


def test_no_drift_next_slot_comes_from_the_slot_not_from_now() -> None:
    s = IntervalSchedule(timedelta(minutes=10), utc(2026, 1, 1))
    # The dispatcher runs 7 minutes late: the next slot is still on the 10-minute grid.
    plan = plan_slots(s, next_slot=utc(2026, 1, 1, 1, 0), now=utc(2026, 1, 1, 1, 7), grace=timedelta(minutes=30))
    assert plan.slots == (utc(2026, 1, 1, 1, 0),)
    assert plan.next_slot == utc(2026, 1, 1, 1, 10)


def test_cron_skipped_hour_runs_once_at_the_end_of_the_gap() -> None:
    s = CronSchedule("30 2 * * *", "Europe/Berlin")
    slots = upcoming(s, after=utc(2026, 3, 27, 12), count=3)
    local = [x.astimezone(BERLIN) for x in slots]
    assert [(x.day, x.hour, x.minute) for x in local] == [(28, 2, 30), (29, 3, 0), (30, 2, 30)]


def test_cron_every_15_minutes_in_the_gap_collapses_to_one_run() -> None:
    s = CronSchedule("*/15 * * * *", "America/New_York")  # 2026-03-08 02:00 EST -> 03:00 EDT
    slots = upcoming(s, after=datetime(2026, 3, 8, 1, 40, tzinfo=NEW_YORK), count=4)
    local = [x.astimezone(NEW_YORK).strftime("%H:%M %Z") for x in slots]
    assert local == ["01:45 EST", "03:00 EDT", "03:15 EDT", "03:30 EDT"]
    assert len(set(slots)) == len(slots)


def test_cron_repeated_hour_runs_once_at_the_first_occurrence() -> None:
    s = CronSchedule("30 2 * * *", "Europe/Berlin")  # 2026-10-25 03:00 CEST -> 02:00 CET
    slots = upcoming(s, after=utc(2026, 10, 24, 12), count=2)
    assert slots[0] == utc(2026, 10, 25, 0, 30)  # 02:30 CEST, the first 02:30
    assert slots[1].astimezone(BERLIN).strftime("%d %H:%M %Z") == "26 02:30 CET"
    hourly = CronSchedule("0 * * * *", "Europe/Berlin")
    runs = upcoming(hourly, after=utc(2026, 10, 24, 23, 30), count=3)  # 01:30 CEST
    assert [r.astimezone(BERLIN).strftime("%H:%M %Z") for r in runs] == ["02:00 CEST", "03:00 CET", "04:00 CET"]


def test_cron_prev_before_inside_the_repeated_hour() -> None:
    s = CronSchedule("*/30 * * * *", "Europe/Berlin")
    # 01:45 UTC is 02:45 CET, the second pass through 02:xx: the last slot before it is the first 02:30.
    assert s.prev_before(utc(2026, 10, 25, 1, 45)) == utc(2026, 10, 25, 0, 30)


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)))
def test_cron_next_and_prev_are_consistent(t: datetime) -> None:
    s = CronSchedule("*/20 1-3 * * *", "Europe/Berlin")
    nxt = s.next_after(t)
    assert nxt > t
    prev = s.prev_before(nxt)
    assert prev is not None and prev <= t
    assert s.next_after(prev) == nxt


@given(
    st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2050, 1, 1), timezones=st.just(UTC)),
    st.integers(min_value=1, max_value=10**9),
)
def test_interval_next_and_prev_are_consistent(t: datetime, every_ms: int) -> None:
    s = IntervalSchedule(timedelta(milliseconds=every_ms), utc(2001, 2, 3, 4, 5))
    nxt = s.next_after(t)
    prev = s.prev_before(nxt)
    assert prev is not None and prev <= t < nxt
    assert nxt - prev == timedelta(milliseconds=every_ms)


HOURLY = IntervalSchedule(timedelta(hours=1), utc(2026, 1, 1))
DOWNTIME = {"next_slot": utc(2026, 1, 1, 0), "now": utc(2026, 1, 1, 5, 30), "grace": timedelta(minutes=5)}


def test_misfire_skip_runs_nothing_and_waits_for_the_next_future_slot() -> None:
    plan = plan_slots(HOURLY, misfire="skip", **DOWNTIME)  # type: ignore[arg-type]
    assert plan.slots == () and plan.skipped and plan.next_slot == utc(2026, 1, 1, 6)


def test_misfire_latest_runs_once_now() -> None:
    plan = plan_slots(HOURLY, misfire="latest", **DOWNTIME)  # type: ignore[arg-type]
    assert plan.slots == (utc(2026, 1, 1, 5),) and plan.next_slot == utc(2026, 1, 1, 6)


def test_misfire_backfill_runs_the_last_n_missed_slots_oldest_first() -> None:
    plan = plan_slots(HOURLY, misfire="backfill", backfill_limit=3, **DOWNTIME)  # type: ignore[arg-type]
    assert plan.slots == (utc(2026, 1, 1, 3), utc(2026, 1, 1, 4), utc(2026, 1, 1, 5))
    assert plan.skipped  # slots 0, 1 and 2 were dropped
    everything = plan_slots(HOURLY, misfire="backfill", backfill_limit=100, **DOWNTIME)  # type: ignore[arg-type]
    assert len(everything.slots) == 6 and not everything.skipped


def test_on_time_slots_always_run_and_latest_does_not_add_a_late_one() -> None:
    now = utc(2026, 1, 1, 5, 2)  # slot 05:00 is 2 minutes old: on time with 5 minutes of grace
    for policy in ("skip", "latest", "backfill"):
        plan = plan_slots(HOURLY, next_slot=utc(2026, 1, 1, 0), now=now, misfire=policy, grace=timedelta(minutes=5))  # type: ignore[arg-type]
        assert plan.slots[-1] == utc(2026, 1, 1, 5)
        if policy != "backfill":
            assert plan.slots == (utc(2026, 1, 1, 5),)


def test_not_due_yet_and_cap() -> None:
    assert plan_slots(HOURLY, next_slot=utc(2026, 1, 1, 6), now=utc(2026, 1, 1, 5)).slots == ()
    fast = IntervalSchedule(timedelta(seconds=1), utc(2026, 1, 1))
    plan = plan_slots(
        fast, next_slot=utc(2026, 1, 1), now=utc(2026, 1, 1, 0, 0, 30), grace=timedelta(hours=1), max_slots=10
    )
    assert len(plan.slots) == 10 and plan.next_slot == utc(2026, 1, 1, 0, 0, 10)  # still due: the next tick goes on


def test_jitter_is_deterministic_and_bounded() -> None:
    a = jitter_for("site|python|Berlin", timedelta(minutes=10))
    assert a == jitter_for("site|python|Berlin", timedelta(minutes=10))
    spread = {jitter_for(f"site|kw{i}|x", timedelta(minutes=10)) for i in range(200)}
    assert len(spread) > 150 and all(timedelta(0) <= j < timedelta(minutes=10) for j in spread)
    assert jitter_for("x", timedelta(0)) == timedelta(0)


def test_durations() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("250ms") == timedelta(milliseconds=250)
    assert parse_duration(90) == timedelta(seconds=90)
    assert format_duration(5400) == "1h30m" and format_duration(0.25) == "250ms"
    for bad in ("", "6x", "h", "1h 2q", -1, True):
        with pytest.raises(ScheduleError):
            parse_duration(bad)  # type: ignore[arg-type]


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ScheduleError, match="5 fields"):
        CronSchedule("* * * *")
    with pytest.raises(ScheduleError, match="time zone"):
        CronSchedule("0 0 * * *", "Mars/Olympus")
    with pytest.raises(ScheduleError, match="positive"):
        IntervalSchedule(timedelta(0))
    with pytest.raises(ScheduleError, match="naive"):
        HOURLY.next_after(datetime(2026, 1, 1))
    with pytest.raises(ScheduleError, match="misfire"):
        plan_slots(HOURLY, next_slot=utc(2026, 1, 1), now=utc(2026, 1, 2), misfire="sometimes")  # type: ignore[arg-type]


@given(
    start=st.integers(min_value=0, max_value=10_000),
    periods=st.integers(min_value=0, max_value=300),
    rest=st.integers(min_value=0, max_value=7_199),
    every=st.integers(min_value=1, max_value=7_200),
    grace=st.integers(min_value=0, max_value=10_000),
    policy=st.sampled_from(["skip", "latest", "backfill"]),
    limit=st.integers(min_value=0, max_value=20),
)
@settings(deadline=None)
def test_plan_slots_properties(
    start: int, periods: int, rest: int, every: int, grace: int, policy: str, limit: int
) -> None:
    lag = periods * every + rest % every
    schedule = IntervalSchedule(timedelta(seconds=every), utc(2026, 1, 1))
    next_slot = utc(2026, 1, 1) + timedelta(seconds=every * start)
    now = next_slot + timedelta(seconds=lag)
    plan = plan_slots(
        schedule,
        next_slot=next_slot,
        now=now,
        misfire=policy,
        backfill_limit=limit,
        grace=timedelta(seconds=grace),  # type: ignore[arg-type]
    )
    slots = list(plan.slots)
    due = [next_slot + timedelta(seconds=every * k) for k in range(lag // every + 1)]
    on_time = [s for s in due if now - s <= timedelta(seconds=grace)]
    late = [s for s in due if now - s > timedelta(seconds=grace)]
    assert slots == sorted(set(slots)) and set(slots) <= set(due)  # on the grid, ordered, no repeats
    assert set(on_time) <= set(slots)  # on-time slots always run
    ran_late = [s for s in slots if s in late]
    assert ran_late == late[len(late) - len(ran_late) :]  # only the most recent late ones
    assert (
        len(ran_late)
        == {"skip": 0, "latest": 0 if on_time else min(1, len(late)), "backfill": min(limit, len(late))}[policy]
    )
    assert plan.next_slot == due[-1] + timedelta(seconds=every)  # the first slot after now: no drift
    assert plan.skipped == (len(ran_late) < len(late))


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 0 31 2 *", "cron '0 0 31 2 *' can never fire: no date matches its day-of-month and month"),
        ("* * 31 4 *", "cron '* * 31 4 *' can never fire"),
        ("61 7 * * *", "cron '61 7 * * *': the minute 61 is out of range 0-59"),
        ("0 24 * * *", "the hour 24 is out of range 0-23"),
        ("0 0 0 * *", "the day-of-month 0 is out of range 1-31"),
        ("0 0 * 13 *", "the month 13 is out of range 1-12"),
        ("0 0 * * 8", "the day-of-week 8 is out of range 0-7"),
        ("0 0 * * */0", "the day-of-week step '0' must be a whole number >= 1"),
        ("R 7 * * *", "uses R (random), which gives another slot on every evaluation"),
        ("@sometimes", "unknown cron alias '@sometimes'"),
        ("* * * *", "expected 5 fields"),
    ],
)
def test_cron_expressions_that_cannot_be_used_are_refused_with_the_reason(expression: str, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        CronSchedule(expression)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("alias", "same_as"),
    [("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"), ("@hourly", "0 * * * *"), ("@weekly", "0 0 * * 0"),
     ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *")],
)
def test_cron_aliases_mean_their_five_field_form(alias: str, same_as: str) -> None:
    t = utc(2026, 3, 14, 15, 9)
    a, b = CronSchedule(alias, "Europe/Berlin"), CronSchedule(same_as, "Europe/Berlin")
    assert [a.next_after(t), a.prev_before(t)] == [b.next_after(t), b.prev_before(t)]


def test_cron_day_of_month_or_day_of_week_as_standard_cron() -> None:
    """``0 9 1 * 1``: the 1st of every month *and* every Monday (either field matches)."""
    cron = CronSchedule("0 9 1 * 1")
    slots, t = [], utc(2026, 5, 28)
    for _ in range(4):
        t = cron.next_after(t)
        slots.append(t)
    # Mon 1 June 2026 is both; then Mondays 8, 15, 22 June.
    assert slots == [utc(2026, 6, 1, 9), utc(2026, 6, 8, 9), utc(2026, 6, 15, 9), utc(2026, 6, 22, 9)]
    may = CronSchedule("0 9 1 * 1").next_after(utc(2026, 4, 28))
    assert may == utc(2026, 5, 1, 9)  # Friday 1 May: the day of month alone matches
