"""The tick's planning step: schedules shared per definition, cron look-ups remembered, same slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from crawlherd.dispatch.outbox import ScheduleCache, plan_target, plan_targets
from crawlherd.dispatch.schedule import CronSchedule, make_schedule, plan_slots
from crawlherd.sitespec import SiteSpec

NOW = datetime(2026, 3, 29, 1, 10, tzinfo=UTC)  # the night Europe/Berlin skips 02:00-03:00
SITE = SiteSpec(
    name="site",
    base_url="https://jobs.example.com",
    search_url_template="https://jobs.example.com/search?q={keywords}&l={location}",
)


def target(target_id: int, **overrides: Any) -> SimpleNamespace:
    row: dict[str, Any] = {
        "id": target_id,
        "website_id": 1,
        "keywords": f"kw {target_id}",
        "location": "Berlin",
        "schedule_kind": "cron",
        "interval_seconds": None,
        "cron": "*/15 * * * *",
        "timezone": "Europe/Berlin",
        "anchor_at": None,
        "jitter_ms": 0,
        "misfire_policy": "backfill",
        "backfill_limit": 3,
        "misfire_grace_seconds": 60.0,
        "next_run_at": NOW - timedelta(hours=1),
        "name": "site",
        "site": SITE,
        "site_error": None,
    }
    row.update(overrides)
    return SimpleNamespace(**row)


def test_cron_schedules_are_shared_per_expression_and_zone() -> None:
    cache = ScheduleCache()
    a, b = cache.of(target(1)), cache.of(target(2, next_run_at=NOW))
    assert a is b
    assert cache.of(target(3, timezone="UTC")) is not a
    assert cache.of(target(4, cron="0 * * * *")) is not a


def test_remembered_cron_look_ups_give_the_slots_of_the_plain_schedule() -> None:
    cache = ScheduleCache()
    rows = [target(i, next_run_at=NOW - timedelta(minutes=7 * i)) for i in range(1, 20)]
    for row in rows:
        plain = plan_slots(
            CronSchedule(row.cron, row.timezone),
            next_slot=row.next_run_at,
            now=NOW,
            misfire="backfill",
            backfill_limit=3,
            grace=timedelta(seconds=60),
        )
        planned = plan_target(row, now=NOW, max_slots=1000, schedules=cache)
        assert [r["slot_at"] for r in planned.outbox] == list(plain.slots)
        assert planned.next_run_at == plain.next_slot
        assert planned.last_scheduled == (plain.slots[-1] if plain.slots else None)


def test_interval_schedules_keep_their_own_anchor() -> None:
    cache = ScheduleCache()
    anchors = [NOW - timedelta(minutes=m) for m in (5, 20, 35)]
    for i, anchor in enumerate(anchors, 1):
        row = target(i, schedule_kind="interval", cron=None, interval_seconds=3600.0, anchor_at=anchor,
                     next_run_at=anchor, misfire_policy="latest", backfill_limit=0)
        plan = plan_target(row, now=NOW, max_slots=1000, schedules=cache)
        schedule = make_schedule(kind="interval", interval_seconds=3600.0, anchor_at=anchor)
        assert [r["slot_at"] for r in plan.outbox] == [anchor]
        assert plan.next_run_at == schedule.next_after(anchor)


def test_a_batch_is_planned_as_each_target_alone() -> None:
    """plan_targets shares slot plans, slot texts and encoders across a batch: same plans, same bytes."""
    hourly: dict[str, Any] = {"schedule_kind": "interval", "cron": None, "interval_seconds": 3600.0,
                              "timezone": "UTC", "misfire_policy": "latest", "backfill_limit": 0}
    rows = [
        *(target(i, **hourly, next_run_at=NOW - timedelta(minutes=10)) for i in range(1, 4)),
        target(4, **hourly, next_run_at=NOW - timedelta(minutes=10), jitter_ms=1500),
        target(5, **{**hourly, "misfire_policy": "skip"}, next_run_at=NOW - timedelta(hours=3, minutes=10)),
        target(6, **hourly, next_run_at=NOW + timedelta(minutes=1)),  # not due: no slot
        target(7, next_run_at=NOW - timedelta(minutes=50)),  # cron, backfill
        target(8, next_run_at=NOW - timedelta(minutes=50), keywords='c++ & "c#" \\ Zürich', location=""),
        target(9, timezone="Mars/Olympus"),  # cannot be scheduled
        target(10, site=None, site_error="stored spec is invalid"),  # cannot be encoded
        target(11, **hourly, next_run_at=NOW - timedelta(minutes=10), keywords="data engineer", location=None),
    ]
    alone = [plan_target(row, now=NOW, max_slots=1000) for row in rows]
    together = plan_targets(rows, now=NOW, max_slots=1000)
    assert together == alone
    assert [len(p.outbox) for p in together] == [1, 1, 1, 1, 0, 0, 3, 3, 0, 0, 1]
