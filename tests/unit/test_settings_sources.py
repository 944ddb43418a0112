"""Settings as pydantic-settings (issue 14): every worker/dispatcher option in all four places, and a
misspelt CRAWLHERD_* variable warned about with the closest real one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from crawlherd.cli import main
from crawlherd.settings import Settings, load_settings, unknown_variables

WORKER_AND_DISPATCH = {
    "worker_concurrency": (7, "9", 11),
    "page_concurrency": (5, "6", 12),
    "max_attempts": (4, "5", 6),
    "backoff": (1.5, "2.5", 3.5),
    "allow_private_addresses": (True, "false", True),
    "dispatch_interval": (0.5, "0.25", 2.0),
    "dispatch_batch_size": (50, "60", 70),
    "dispatch_lease": (30.0, "40", 50.0),
    "page_dispatcher": ("memory-adaptive", "semaphore", "memory-adaptive"),
}


@pytest.mark.parametrize("name", sorted(WORKER_AND_DISPATCH))
def test_every_worker_and_dispatcher_option_is_settable_four_ways(name: str, tmp_path: Path) -> None:
    in_file, in_env, in_flag = WORKER_AND_DISPATCH[name]
    default = Settings.model_fields[name].default
    cfg = tmp_path / "crawlherd.toml"
    cfg.write_text(f"{name} = {in_file!r}\n".replace("True", "true").replace("'", '"'))
    env = {f"CRAWLHERD_{name.upper()}": in_env}
    assert getattr(load_settings(env={}), name) == default
    assert getattr(load_settings(cfg, env={}), name) == in_file
    from_env = getattr(load_settings(cfg, env=env), name)
    assert str(from_env).lower() == in_env or from_env == type(default)(in_env)
    assert getattr(load_settings(cfg, env=env, **{name: in_flag}), name) == in_flag


def test_a_misspelt_variable_names_the_closest_setting(caplog: pytest.LogCaptureFixture) -> None:
    env = {"CRAWLHERD_CONCURENCY": "8", "CRAWLHERD_MAX_ATEMPTS": "2", "CRAWLHERD_XYZZY": "1",
           "CRAWLHERD_REQUIRE_SERVICES": "1", "CRAWLHERD_TEST_REDIS_URL": "redis://x"}
    assert unknown_variables(env) == [
        "CRAWLHERD_CONCURENCY is not a crawlherd setting and is ignored; did you mean CRAWLHERD_CONCURRENCY?",
        "CRAWLHERD_MAX_ATEMPTS is not a crawlherd setting and is ignored; did you mean CRAWLHERD_MAX_ATTEMPTS?",
        "CRAWLHERD_XYZZY is not a crawlherd setting and is ignored; the settings are listed in docs/configuration.md",
    ]
    with caplog.at_level(logging.WARNING, logger="crawlherd.settings"):
        s = load_settings(env={"CRAWLHERD_WORKER_CONCURENCY": "8"})
    assert s.worker_concurrency == 4
    assert (
        "CRAWLHERD_WORKER_CONCURENCY is not a crawlherd setting and is ignored; "
        "did you mean CRAWLHERD_WORKER_CONCURRENCY?"
    ) in caplog.messages


def test_the_cli_warns_about_a_misspelt_variable(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["db", "current", "--database-url", f"sqlite:///{tmp_path}/x.db"],
        env={"CRAWLHERD_DATABSE_URL": "sqlite:///typo.db"},
    )
    assert (
        "warning: CRAWLHERD_DATABSE_URL is not a crawlherd setting and is ignored; "
        "did you mean CRAWLHERD_DATABASE_URL?\n"
    ) in result.output


def test_worker_help_names_the_setting_behind_each_flag() -> None:
    out = " ".join(CliRunner().invoke(main, ["worker", "--help"]).output.split())
    for setting in ("worker_concurrency", "page_concurrency", "max_attempts", "backoff", "allow_private_addresses"):
        assert f"setting {setting}" in out
