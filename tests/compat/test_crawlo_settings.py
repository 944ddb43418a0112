"""Crawlo's run-mode settings on crawlherd: the presets, how a project's settings are put together,
the framework object that opens the scheduler, the priority calculator's bounded statistics."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from crawlherd.compat.crawlo.core.config import BASE_CONFIG, MODE_CONFIG_MAP, CrawloConfig
from crawlherd.compat.crawlo.crawler import CrawloFramework
from crawlherd.compat.crawlo.project import _get_mode_settings, _load_project_settings, _update_queue_related_settings
from crawlherd.compat.crawlo.queue.priority_calculator import PriorityCalculator
from crawlherd.compat.crawlo.queue.queue_types import QueueType
from crawlherd.compat.crawlo.settings.setting_manager import SettingManager


def test_presets() -> None:
    standalone = CrawloConfig.standalone(project_name="p", concurrency=20, log_level="DEBUG").to_dict()
    assert (standalone["RUN_MODE"], standalone["QUEUE_TYPE"], standalone["CONCURRENCY"]) == ("standalone", "memory", 20)
    assert "MemoryFilter" in standalone["FILTER_CLASS"] and standalone["LOG_LEVEL"] == "DEBUG"
    assert standalone.get("REDIS_HOST") is None
    distributed = CrawloConfig.distributed(redis_host="10.0.0.5", redis_port=6380, project_name="p").to_dict()
    assert (distributed["QUEUE_TYPE"], distributed["CONCURRENCY"]) == ("redis_stream", 16)
    assert distributed["REDIS_URL"] == "redis://10.0.0.5:6380/0"
    assert distributed["SCHEDULER_QUEUE_NAME"] == "crawlo:p:queue:requests"
    assert "AioRedisFilter" in distributed["FILTER_CLASS"]
    auto = CrawloConfig.auto(project_name="p").to_dict()
    assert (auto["RUN_MODE"], auto["QUEUE_TYPE"], auto["CONCURRENCY"]) == ("auto", "auto", 8)
    assert BASE_CONFIG["CONCURRENCY"] == 8
    assert all({"RUN_MODE", "QUEUE_TYPE", "FILTER_CLASS", "DEFAULT_DEDUP_PIPELINE"} <= set(m)
               for m in MODE_CONFIG_MAP.values())
    with pytest.raises(ValueError, match="PROJECT_NAME must be a non-empty string"):
        CrawloConfig.standalone(project_name="")
    assert QueueType.from_string("REDIS_STREAM").supports_distributed()


def test_mode_settings_decide_the_queue() -> None:
    settings = SettingManager({"PROJECT_NAME": "p", "QUEUE_TYPE": "redis", "EXISTING": 1})
    assert settings.get("QUEUE_TYPE") == "redis" and SettingManager().get("QUEUE_TYPE", "memory") == "auto"
    assert _get_mode_settings(settings, "standalone")["QUEUE_TYPE"] == "memory"
    assert _get_mode_settings(settings, "no-such-mode")["RUN_MODE"] == "standalone"
    assert _get_mode_settings(settings, "distributed")["QUEUE_TYPE"] == "redis_stream"
    assert settings.get("EXISTING") == 1
    updated: dict[str, object] = {}
    _update_queue_related_settings(updated, "redis", settings)
    assert updated["FILTER_CLASS"] == "crawlo.filters.AioRedisFilter"
    custom = SettingManager({"FILTER_CLASS": "my.Filter", "DEFAULT_DEDUP_PIPELINE": "my.Pipeline"})
    kept: dict[str, object] = {}
    _update_queue_related_settings(kept, "auto", custom)
    assert kept == {"FILTER_CLASS": "my.Filter", "DEFAULT_DEDUP_PIPELINE": "my.Pipeline"}
    untouched = {"EXISTING": "value"}
    _update_queue_related_settings(untouched, "unknown", settings)
    assert untouched == {"EXISTING": "value"}


def test_project_settings_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "proj_settings_compat.py").write_text(
        "RUN_MODE = 'distributed'\nQUEUE_TYPE = 'memory'\nPROJECT_NAME = 'proj'\nCONCURRENCY = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = _load_project_settings({"CONCURRENCY": 5}, settings_module="proj_settings_compat")
    assert settings.get("QUEUE_TYPE") == "redis_stream"  # the run mode decides the queue
    assert "AioRedisFilter" in settings.get("FILTER_CLASS")
    assert settings.get("CONCURRENCY") == 5  # the run's own settings come last
    sys.modules.pop("proj_settings_compat", None)


async def test_framework_opens_the_scheduler_of_its_settings() -> None:
    framework = CrawloFramework(CrawloConfig.standalone(concurrency=4, scheduler_max_queue_size=7).to_dict())
    assert (framework.settings.get("QUEUE_TYPE"), framework.settings.get("RUN_MODE")) == ("memory", "standalone")
    scheduler = await framework.open_scheduler()
    try:
        assert scheduler.queue_manager.queue_type is QueueType.MEMORY
        assert scheduler.queue_manager.max_size == 7
    finally:
        await scheduler.close()


def test_priority_calculator_keeps_bounded_statistics() -> None:
    calc = PriorityCalculator()
    calc.MAX_DOMAINS, calc.MAX_URLS = 2, 10
    for i in range(3):
        request = SimpleNamespace(url=f"http://domain{i}.com/page", priority=0, meta={})
        calc.update_stats(request)
        calc.update_error_count(request)
    assert set(calc.domain_stats) == {"domain1.com", "domain2.com"}
    assert "domain0.com" not in calc.error_counts
    for i in range(11):
        calc.update_stats(SimpleNamespace(url=f"http://domain2.com/p{i}", priority=0, meta={}))
    assert len(calc.url_stats) <= 10
    fresh = SimpleNamespace(url="http://domain2.com/new", priority=0, meta={"depth": 2})
    assert calc.calculate_priority(fresh) == -2 - 1 - 2  # used within 5 s, over 10 requests, depth 2
