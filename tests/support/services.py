"""The policy for what a test needs from the machine (a service, a server binary, a tool): when it is
missing, the test is skipped -- loudly, with a reason starting ``SERVICE MISSING:``, listed at the
end of the run by ``tests/conftest.py`` -- unless ``CRAWLHERD_REQUIRE_SERVICES=1`` (as in CI), in
which case it fails.

The end-of-run list is read from the skip reports themselves, so it works under pytest-xdist too
(the reports travel from the workers to the controller; a module-level dict would not).
"""

from __future__ import annotations

import os
import shutil
import socket
from typing import NoReturn

import pytest

__all__ = ["MISSING", "REQUIRE_SERVICES", "missing", "missing_services", "require_service", "require_tool"]

REQUIRE_SERVICES = os.environ.get("CRAWLHERD_REQUIRE_SERVICES") == "1"

#: How the reason of a skip for something missing begins.
MISSING = "SERVICE MISSING: "


def missing(message: str) -> NoReturn:
    """``message`` says what is missing: fail under CRAWLHERD_REQUIRE_SERVICES=1, else skip loudly."""
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} and CRAWLHERD_REQUIRE_SERVICES=1", pytrace=False)
    pytest.skip(f"{MISSING}{message} (set CRAWLHERD_REQUIRE_SERVICES=1 to fail instead)")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """``name`` must listen on ``host:port``."""
    if not _reachable(host, port):
        missing(f"{name} is not reachable at {host}:{port}")


def require_tool(name: str, purpose: str) -> str:
    """The path of the executable ``name`` (needed for ``purpose``)."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed ({purpose})")
    return path


def missing_services(reports: list[pytest.TestReport]) -> list[str]:
    """What the skipped ``reports`` say is missing, each message once, in order."""
    found: dict[str, None] = {}
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        if MISSING in reason:
            found[reason.split(MISSING, 1)[1].split(" (set CRAWLHERD_REQUIRE_SERVICES", 1)[0]] = None
    return list(found)
