"""CrawlerMonitor statistics and its quiet-unless-terminal view."""

from __future__ import annotations

import io

from rich.console import Console

from crawlherd.crawler.concurrency.monitor import CrawlerMonitor
from crawlherd.request import Request
from crawlherd.result import CrawlResult, DispatchInfo


def finish(monitor: CrawlerMonitor, url: str, status: int | None, *, seconds: float = 2.0, mem: int = 100) -> None:
    monitor.task_started()
    req = Request(url)
    info = DispatchInfo(1, 0.0, seconds, memory_at_start=mem, memory_at_end=mem, peak_memory=mem)
    ok = status is not None and status < 400
    monitor.task_finished(CrawlResult(url=url, success=ok, status_code=status, request=req, dispatch=info))


def test_counts_per_status_and_domain() -> None:
    m = CrawlerMonitor(enable_ui=False)
    m.add_queued(5)
    finish(m, "http://a.example/1", 200, mem=100)
    finish(m, "http://a.example/2", 404, mem=300)
    finish(m, "http://b.example:8080/1", None, mem=200)
    m.task_started()
    m.task_retried()
    s = m.get_statistics()
    assert (s["completed"], s["failed"], s["retried"], s["in_flight"], s["queued"]) == (1, 2, 1, 0, 2)
    assert s["status_counts"] == {200: 1, 404: 1, "error": 1}
    assert s["domain_counts"] == {"a.example": 2, "b.example:8080": 1}
    assert s["avg_memory"] == 200
    assert s["peak_memory"] >= 300
    assert s["total"] == 5


def test_eta_accounts_for_concurrency_before_throughput_is_known() -> None:
    m = CrawlerMonitor(enable_ui=False, concurrency=10)
    m.add_queued(21)
    finish(m, "http://a.example/1", 200, seconds=2.0)
    s = m.get_statistics()
    # 20 left, 2 s each, 10 at a time: about 4 s -- not 40 s (which ignoring concurrency would say).
    assert s["eta_seconds"] == 4.0


def test_eta_zero_when_done_and_none_before_anything() -> None:
    m = CrawlerMonitor(enable_ui=False)
    assert m.get_statistics()["eta_seconds"] is None
    m.add_queued(1)
    finish(m, "http://a.example/1", 200)
    assert m.get_statistics()["eta_seconds"] == 0.0


async def test_quiet_when_not_attached_to_a_terminal() -> None:
    out = io.StringIO()
    m = CrawlerMonitor(console=Console(file=out, force_terminal=False))
    m.start()
    m.add_queued(1)
    finish(m, "http://a.example/1", 200)
    await m.stop()
    assert out.getvalue() == ""


async def test_live_view_on_a_terminal() -> None:
    out = io.StringIO()
    m = CrawlerMonitor(console=Console(file=out, force_terminal=True, width=100), refresh_per_second=50)
    m.start()
    m.add_queued(2)
    finish(m, "http://a.example/1", 200)
    await m.stop()
    text = out.getvalue()
    assert "completed" in text and "a.example:1" in text
