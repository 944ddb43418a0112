"""crawl4ai's CrawlerMonitor, both constructors; its task API used from threads without an event
loop, as crawl4ai's own monitor test does."""

from __future__ import annotations

import threading
import time

import pytest

from crawlherd.compat.crawl4ai import CrawlerMonitor, CrawlStatus, DisplayMode


def test_the_task_api_from_threads() -> None:
    monitor = CrawlerMonitor(urls_total=20, refresh_rate=0.5, enable_ui=False)
    monitor.start()
    assert monitor.is_running
    ids = [f"task-{i}" for i in range(20)]
    for i, task_id in enumerate(ids):
        monitor.add_task(task_id, f"https://example.com/page{i}")
    assert monitor.get_all_task_stats()[ids[0]]["status"] == CrawlStatus.QUEUED.name

    def work(task_id: str, fail: bool) -> None:
        monitor.update_task(task_id, status=CrawlStatus.IN_PROGRESS, start_time=time.time(), wait_time=0.1)
        for usage in (5.0, 12.0, 7.0):
            peak = max(usage, monitor.get_task_stats(task_id).get("peak_memory", 0))
            monitor.update_task(task_id, memory_usage=usage, peak_memory=peak)
        monitor.update_task(task_id, status=CrawlStatus.FAILED if fail else CrawlStatus.COMPLETED,
                            end_time=time.time(), error_message="timeout" if fail else None, memory_usage=0.0)

    threads = [threading.Thread(target=work, args=(task_id, i % 10 == 0)) for i, task_id in enumerate(ids)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    monitor.update_queue_statistics(total_queued=0, highest_wait_time=0.1, avg_wait_time=0.1)
    monitor.update_memory_status("PRESSURE")
    summary = monitor.get_summary()
    assert (summary["completed"], summary["failed"], summary["in_progress"], summary["queued"]) == (18, 2, 0, 0)
    assert summary["progress"] == 100.0 and summary["peak_memory"] == 12.0
    assert monitor.get_task_stats(ids[0])["error_message"] == "timeout"
    assert monitor.get_queue_stats()["highest_wait_time"] == 0.1
    assert monitor.get_memory_status() == "PRESSURE"
    monitor.stop()
    assert not monitor.is_running
    assert monitor.get_task_stats("nope") == {}
    with pytest.raises(ValueError, match="memory status"):
        monitor.update_memory_status("HOT")


async def test_the_earlier_constructor_and_an_awaitable_stop() -> None:
    monitor = CrawlerMonitor(max_visible_rows=5, display_mode=DisplayMode.AGGREGATED, enable_ui=False)
    assert monitor.max_visible_rows == 5 and monitor.display_mode is DisplayMode.AGGREGATED
    monitor.start()
    await monitor.stop()
    with pytest.raises(KeyError, match="add_task"):
        monitor.update_task("unknown", status=CrawlStatus.COMPLETED)
