"""FrontierStats.summary() -> a heartbeat's JSON -> HostState.from_summary(): the round trip the
console's Frontier page and `crawlherd explain` rely on, and what a heartbeat of another version gives."""

from __future__ import annotations

import json

from crawlherd.frontier import FrontierStats, HostState


def _stats(**states: HostState) -> FrontierStats:
    return FrontierStats(
        queued=sum(s.queued for s in states.values()), in_flight=0, duplicates_filtered=0, enqueued=0, acked=0,
        retries=0, failures=0, expired_leases=0, oldest_queued_age=None,
        hosts={h: s.queued for h, s in states.items()}, host_states=states,
    )


def test_summary_round_trips_through_json_and_ranks_blocked_hosts_first() -> None:
    blocked = HostState(queued=1, in_flight=0, max_in_flight=2, delay=1.0, ready_in=40.0, backoff=40.0)
    busy = HostState(queued=9, in_flight=2, max_in_flight=2, delay=0.0, ready_in=0.0)
    idle = HostState(queued=0, in_flight=1, max_in_flight=4, delay=0.5, ready_in=0.2)
    summary = json.loads(json.dumps(_stats(**{"b.test": blocked, "a.test": busy, "c.test": idle}).summary()))
    assert list(summary["host_states"]) == ["b.test", "a.test", "c.test"]
    assert summary["blocked_hosts"] == 1 and summary["queued"] == 10
    back = {h: HostState.from_summary(v) for h, v in summary["host_states"].items()}
    assert back == {"b.test": blocked, "a.test": busy, "c.test": idle}
    assert (blocked.held, blocked.blocked, busy.held, busy.blocked, idle.held) == (True, True, True, False, False)


def test_summary_keeps_the_hosts_with_most_queued() -> None:
    states = {f"h{i}.test": HostState(queued=i, in_flight=0, max_in_flight=1, delay=0.0, ready_in=0.0)
              for i in range(9)}
    summary = _stats(**states).summary(max_hosts=3)
    assert list(summary["host_states"]) == ["h8.test", "h7.test", "h6.test"]
    assert list(summary["hosts"]) == ["h8.test", "h7.test", "h6.test"]


def test_a_foreign_heartbeat_is_not_read() -> None:
    good = {"queued": 1, "in_flight": 0, "max_in_flight": 1, "delay": 2.0, "ready_in": 1.0, "backoff": 0.0}
    assert HostState.from_summary({**good, "new_field": "x"}) == HostState(1, 0, 1, 2.0, 1.0, 0.0)
    assert HostState.from_summary({k: v for k, v in good.items() if k != "delay"}) is None
    assert HostState.from_summary({**good, "queued": "many"}) is None
    assert HostState.from_summary("not a mapping") is None
