"""One Chromium per test process, shared by every browser test (:func:`shared_chromium`): started once
with a DevTools port and reached over CDP (``BrowserOptions(cdp_url=...)`` or
``CRAWLHERD_CHROMIUM_CDP_URL``), so a test -- or a ``crawlherd`` process it starts -- opens a browser
context in seconds instead of launching Chromium (10-20 s on a loaded machine). Ended by its PID at the
end of the session."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlherd.fetch.chromium import CHROMIUM_ARGS, LOCAL_NETWORK_ARGS

__all__ = ["SharedChromium", "shared_chromium"]


class SharedChromium:
    """Chromium at ``executable`` with a DevTools endpoint (:attr:`cdp_url`), headless, launched with
    crawlherd's switches and private addresses allowed (the guard decides; the tests' sites are on
    loopback)."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self._dir = tempfile.TemporaryDirectory(prefix="crawlherd-chromium-")
        self.process: subprocess.Popen[bytes] | None = None
        self.cdp_url = ""

    def start(self, timeout: float = 90.0) -> SharedChromium:
        profile = Path(self._dir.name)
        self.process = subprocess.Popen(
            [self.executable, "--headless", *CHROMIUM_ARGS, *LOCAL_NETWORK_ARGS, "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Chromium exited with {self.process.returncode} before its DevTools port was up")
            lines = port_file.read_text().splitlines() if port_file.exists() else []
            if len(lines) >= 2:
                self.cdp_url = f"ws://127.0.0.1:{lines[0]}{lines[1]}"
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"Chromium's DevTools port was not up within {timeout:g}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        with contextlib.suppress(OSError):
            self._dir.cleanup()


@pytest.fixture(scope="session")
def shared_chromium(chromium: str) -> Iterator[str]:
    """The DevTools URL of this test process's Chromium (started on first use, stopped at the end)."""
    browser = SharedChromium(chromium).start()
    try:
        yield browser.cdp_url
    finally:
        browser.stop()
