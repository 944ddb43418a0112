"""Screenshots of the pages that failed, kept for the operator.

A website with ``[websites.browser] failure_screenshots = true`` has every page rendered with a
screenshot; the worker keeps it only when the page failed or was blocked -- a status of 400 or more, a
page judged blocked, a wait that never came true -- as a PNG file under the worker's
``screenshot_dir``::

    <screenshot_dir>/<website>/<UTC time>-<status or error>-<digest of the URL>.png

and names the file in what it records of the failure (the job's error in ``job_runs``, which the
console and ``crawlherd explain`` show; the worker's last errors), so the operator finds it from there.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from datetime import UTC, datetime
from pathlib import Path

from crawlherd.result import CrawlResult

__all__ = ["keep_screenshot"]

log = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _write(path: Path, png: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(png)
    tmp.replace(path)


async def keep_screenshot(directory: str | Path, website: str, result: CrawlResult) -> Path | None:
    """Write ``result``'s screenshot (if it has one) under ``directory``; its path, or None. A file
    that cannot be written is logged, never raised: the page's failure is what counts."""
    png = result.screenshot_png
    if not png:
        return None
    now = datetime.now(UTC)
    what = str(result.status_code) if result.status_code is not None else (result.error_type or "failed")
    digest = hashlib.sha256(result.url.encode()).hexdigest()[:12]
    name = f"{now:%Y%m%dT%H%M%S%fZ}-{_UNSAFE.sub('_', what)}-{digest}.png"
    path = Path(directory) / _UNSAFE.sub("_", website) / name
    try:
        await asyncio.to_thread(_write, path, png)
    except OSError as exc:
        log.warning("could not keep the screenshot of %s in %s: %s", result.url, path, exc)
        return None
    log.info("kept the screenshot of failed page %s: %s", result.url, path)
    return path
