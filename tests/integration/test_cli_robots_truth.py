"""``crawlherd crawl --respect-robots`` says why robots.txt could not be read (issue 14): a DNS failure,
a refused connection and a timeout are reported as such, never as "disallowed by robots.txt"."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator

import pytest

from tests.support.forkserver import exec_crawlherd

pytestmark = pytest.mark.timeout(90)


async def crawl(*args: str) -> tuple[int, str]:
    proc = await exec_crawlherd(
        "crawl", "--respect-robots", "--depth", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


async def test_dns_failure_is_reported_as_a_dns_failure() -> None:
    code, err = await crawl("http://no-such-host.invalid/page")
    assert code == 1
    assert "disallowed by robots.txt" not in err
    assert "  RobotsUnavailableError: 1\n" in err
    assert (
        "    e.g. http://no-such-host.invalid/page: not fetched: http://no-such-host.invalid/robots.txt could not "
        "be read: DNS lookup failed for no-such-host.invalid (" in err
    )


async def test_refused_connection_is_reported_as_refused(closed_port: int) -> None:
    code, err = await crawl(f"http://127.0.0.1:{closed_port}/page", "--allow-private")
    assert code == 1
    assert "disallowed by robots.txt" not in err
    assert (
        f"    e.g. http://127.0.0.1:{closed_port}/page: not fetched: http://127.0.0.1:{closed_port}/robots.txt "
        f"could not be read: connection refused by 127.0.0.1:{closed_port}\n" in err
    )


async def test_timeout_is_reported_as_a_timeout(silent_port: int) -> None:
    code, err = await crawl(f"http://127.0.0.1:{silent_port}/page", "--allow-private", "--timeout", "1")
    assert code == 1
    assert "disallowed by robots.txt" not in err
    # read and total timeouts are both 1 s: either may fire first
    prefix = f"    e.g. http://127.0.0.1:{silent_port}/page: not fetched: http://127.0.0.1:{silent_port}/robots.txt "
    reasons = r"(total timeout \(1\.0 s\)|read timeout \(1 s without data\))"
    assert re.search(re.escape(prefix + "could not be read: ") + reasons + "\n", err), err
