from __future__ import annotations

from pathlib import Path

import pytest

from crawlherd import load_settings, open_scheduler
from crawlherd._redact import redact_url
from crawlherd.brokers import open_broker
from crawlherd.errors import ConfigurationError


def test_settings_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "crawlherd.toml"
    cfg.write_text('concurrency = 4\ndelay = 2.5\nfrontier_url = "sqlite:///f.db"\n')
    env = {"CRAWLHERD_CONCURRENCY": "8", "CRAWLHERD_REQUIRE_SERVICES": "1", "OTHER": "x"}
    s = load_settings(cfg, env=env, delay=None, user_agent="me")
    assert s.concurrency == 8  # env beats file
    assert s.delay == 2.5  # file beats default; None flag ignored
    assert s.frontier_url == "sqlite:///f.db"
    assert s.user_agent == "me"  # flag beats all
    assert load_settings(cfg, env=env, concurrency=2).concurrency == 2


def test_bad_settings_say_what_and_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="concurrency"):
        load_settings(env={"CRAWLHERD_CONCURRENCY": "many"})
    bad = tmp_path / "bad.toml"
    bad.write_text("concurrency = [")
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        load_settings(bad, env={})
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_settings(tmp_path / "missing.toml", env={})
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("concurency = 3\n")
    with pytest.raises(ConfigurationError, match="concurency"):
        load_settings(unknown, env={})


def test_secrets_are_redacted() -> None:
    assert redact_url("amqp://guest:s3cret@host:5672/") == "amqp://guest:***@host:5672/"
    assert redact_url("redis://:pw@h/0?password=x&db=1") == "redis://:***@h/0?password=***&db=1"
    s = load_settings(env={"CRAWLHERD_DATABASE_URL": "postgresql://u:hunter2@db/x"})
    assert "hunter2" not in repr(s)
    assert "hunter2" not in str(s.redacted())


def test_effective_broker_defaults_to_the_sqlite_config_db() -> None:
    assert load_settings(env={}).effective_broker_url == "sqlite:///crawlherd.db"
    pg = load_settings(env={"CRAWLHERD_DATABASE_URL": "postgresql://db/x"})
    with pytest.raises(ConfigurationError, match="CRAWLHERD_BROKER_URL"):
        _ = pg.effective_broker_url


def test_unknown_schemes_name_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"known schemes: memory://, redis://"):
        open_scheduler("kafka://x")
    with pytest.raises(ConfigurationError, match="amqp://"):
        open_broker("nats://x")


def test_bad_frontier_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown frontier option 'dely'"):
        open_scheduler("memory://", dely=1)
    with pytest.raises(ConfigurationError, match="delay"):
        open_scheduler("memory://?delay=-1")
    with pytest.raises(ConfigurationError, match="full_policy"):
        open_scheduler("memory://", full_policy="drop")
    with pytest.raises(ConfigurationError, match="not a float"):
        open_scheduler("memory://?delay=soon")
