"""The worker says an outage once: one warning when it starts, one info line when it ends; a failure
just after the recovery (a pooled connection to the restarted server) is the same outage."""

from __future__ import annotations

import logging

import pytest

from crawlherd._resilience import OutageLog, backoff_delay


def test_one_warning_and_one_info_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    outages = OutageLog(logging.getLogger("t"), "worker w")
    assert outages.up("broker") is False  # never down: nothing said
    assert outages.down("broker", "refused") is True
    for _ in range(50):
        assert outages.down("broker", "refused") is False
    assert outages.up("broker") is True
    assert outages.down("broker", "stale pooled connection") is False  # within the grace: same outage
    assert outages.up("broker") is True
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, _ in said] == ["WARNING", "INFO"]
    assert "broker unavailable (refused)" in said[0][1] and "broker is back after" in said[1][1]


def test_backoff_grows_and_is_capped() -> None:
    assert 0.4 <= backoff_delay(1) <= 0.6
    assert 3.2 <= backoff_delay(4) <= 4.8
    assert backoff_delay(100) <= 30.0
