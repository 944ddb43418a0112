"""A broker that is down at start-up is said at start-up and on every status line of ``worker``,
``dispatch`` and ``run`` until it is back (issue 23).

The broker is Redis behind a loopback TCP proxy the test owns, down (its port closed) when the
process starts: the process must say so at once (before its first status line) and carry the outage
("broker unavailable for N s") on every status line; once the test brings the proxy up, the process
must say the broker is back and its status lines must drop the outage. ``dispatch`` has nothing due
the whole time: today it printed nothing but its start line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawlherd.db import upgrade
from tests.support.processes import CliProcess, wait_until

from .._netutil import TcpProxy

pytestmark = pytest.mark.redis

#: A status line (worker and run: pages/items rates; dispatch: its totals since the start).
STATUS = re.compile(r"^\d\d:\d\d:\d\d (pages \d+|dispatch since the start)", re.MULTILINE)

EXTRA = {"worker": ["--frontier-url", "memory://"], "dispatch": ["--interval", "0.2"],
         "run": ["--frontier-url", "memory://", "--no-console"]}


def _status_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if STATUS.match(line)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["worker", "dispatch", "run"])
async def test_a_broker_down_at_start_up_is_on_every_status_line_until_it_is_back(
    command: str, tmp_path: Path, redis_url: str, unique_name: str
) -> None:
    redis = redis_url.removeprefix("redis://").split("/")[0]
    host, port = redis.split(":")
    proxy = TcpProxy(host, int(port))
    await proxy.up()
    await proxy.down()  # the port is closed: the broker is "down" from the start
    db_url = f"sqlite:///{tmp_path / 'config.db'}"
    await upgrade(db_url)
    broker_url = f"redis://127.0.0.1:{proxy.port}/0?prefix={unique_name}"
    proc = CliProcess([command, "--database-url", db_url, "--broker-url", broker_url, *EXTRA[command]],
                      tmp_path / f"{command}.log", env={"CRAWLHERD_STATUS_INTERVAL": "0.2"})
    await proc.start()
    try:
        async def three_status_lines() -> bool:
            return len(_status_lines(proc.log)) >= 3

        await wait_until(three_status_lines, alive=[proc])
        log = proc.log
        said = log.find("broker unavailable (")
        assert 0 <= said < log.find(_status_lines(log)[0]), log  # said at start-up, before any status line
        assert all("broker unavailable for" in line for line in _status_lines(log)), log

        await proxy.up()
        seen = len(_status_lines(proc.log))

        async def back_and_off_the_status_lines() -> bool:
            lines = _status_lines(proc.log)[seen:]
            return "broker is back" in proc.log and any("unavailable" not in line for line in lines)

        await wait_until(back_and_off_the_status_lines, alive=[proc])
        last = _status_lines(proc.log)[-1]
        assert "unavailable" not in last, proc.log
    finally:
        await proc.stop()
        await proxy.down()
    proc.assert_clean()


@pytest.mark.postgres
@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["worker", "dispatch"])
async def test_a_config_db_down_at_start_up_is_waited_for_on_status_lines_until_it_is_back(
    command: str, tmp_path: Path, postgres_db_url: str
) -> None:
    """``worker`` and ``dispatch`` cannot check the config DB's migration without it: they wait, say so
    at once and on a status line per try, and start once it answers (today: exit 2 at once)."""
    where = postgres_db_url.split("@", 1)[1].split("/", 1)[0] if "@" in postgres_db_url else (
        postgres_db_url.split("//", 1)[1].split("/", 1)[0])
    host, port = where.split(":")
    proxy = TcpProxy(host, int(port))
    await proxy.up()
    await proxy.down()
    db_url = postgres_db_url.replace(where, f"127.0.0.1:{proxy.port}", 1)
    proc = CliProcess([command, "--database-url", db_url, "--broker-url", f"sqlite:///{tmp_path / 'broker.db'}",
                       *EXTRA[command]], tmp_path / f"{command}.log", env={"CRAWLHERD_STATUS_INTERVAL": "0.2"})
    await proc.start()
    try:
        async def waiting_lines() -> bool:
            return proc.log.count("waiting for the config DB: config DB unavailable for") >= 3

        await wait_until(waiting_lines, alive=[proc])
        assert proc.log.find("config DB unavailable (") < proc.log.find("waiting for the config DB"), proc.log
        await proxy.up()

        async def started() -> bool:
            return "config DB is back" in proc.log and len(_status_lines(proc.log)) >= 2

        await wait_until(started, alive=[proc])
        assert "unavailable" not in _status_lines(proc.log)[-1], proc.log
    finally:
        await proc.stop()
        await proxy.down()
    proc.assert_clean()
