"""One settings object for every command: defaults < ``crawlherd.toml`` < ``CRAWLHERD_*`` environment
< command-line flags. Every setting is documented in ``docs/configuration.md``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crawlherd._redact import redact_url
from crawlherd.errors import ConfigurationError

__all__ = ["ENV_PREFIX", "Settings", "load_settings"]

ENV_PREFIX = "CRAWLHERD_"
DEFAULT_CONFIG_FILE = "crawlherd.toml"


class Settings(BaseModel):
    """Every knob crawlherd reads. Field names are the TOML keys; ``CRAWLHERD_<NAME>`` sets them too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = Field("sqlite:///crawlherd.db", description="Config DB (SQLite file or PostgreSQL).")
    broker_url: str = Field("", description="Message broker; empty means a table in the config DB file (sqlite).")
    frontier_url: str = Field(
        "",
        description="Frontier of the workers' pages; empty means a SQLite file beside the config DB "
        "when that is SQLite (<name>-frontier.db), else memory://. Use redis://... to share it between workers.",
    )
    user_agent: str = Field("crawlherd/0.1 (+https://github.com/crawlherd/crawlherd)", description="User-Agent.")
    concurrency: int = Field(16, ge=1, le=10_000, description="Requests in flight per process.")
    delay: float = Field(1.0, ge=0, description="Default per-host minimum delay between requests (s).")
    max_in_flight_per_host: int = Field(2, ge=1, description="Default per-host in-flight cap.")
    respect_robots: bool = Field(True, description="Obey robots.txt (and its Crawl-delay).")
    allow_private_addresses: bool = Field(
        False, description="Let the fetchers reach private, loopback and link-local addresses."
    )
    runs_retention: str = Field(
        "90d", description="`crawlherd db prune`: delete job runs finished longer ago than this ('never' keeps them)."
    )
    items_retention: str = Field(
        "never", description="`crawlherd db prune`: delete items last seen longer ago than this ('never' keeps them)."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING", description="Logging level (-v and -vv raise it to INFO and DEBUG)."
    )

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict with secrets in URLs masked (for logs and ``config show``)."""
        return {k: redact_url(v) if k.endswith("_url") and isinstance(v, str) else v for k, v in self}

    def __repr_args__(self) -> Any:
        return list(self.redacted().items())

    @property
    def effective_frontier_url(self) -> str:
        """The frontier URL; by default a SQLite file beside a SQLite config DB, else ``memory://``.

        (A sibling file, not the config DB file itself: the SQLite frontier commits synchronously, which
        is what makes it fast, and must not wait on the config DB's write lock inside the event loop.)"""
        if self.frontier_url:
            return self.frontier_url
        return frontier_beside(self.database_url)

    @property
    def effective_broker_url(self) -> str:
        """The broker URL, defaulting to the config DB file when it is SQLite."""
        if self.broker_url:
            return self.broker_url
        if self.database_url.startswith("sqlite"):
            return self.database_url
        raise ConfigurationError(
            "broker_url is not set and the config DB is not SQLite: set CRAWLHERD_BROKER_URL "
            "(redis://..., amqp://... or sqlite:///...)"
        )


def frontier_beside(database_url: str) -> str:
    """``sqlite:///dir/name.db`` -> ``sqlite:///dir/name-frontier.db``; anything else -> ``memory://``."""
    if not database_url.startswith("sqlite:///"):
        return "memory://"
    path = database_url[len("sqlite:///") :].split("?", 1)[0]
    stem, dot, ext = path.rpartition(".")
    return f"sqlite:///{stem}-frontier.{ext}" if dot and "/" not in ext else f"sqlite:///{path}-frontier"


def _coerce_env(raw: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key.startswith(ENV_PREFIX) and key != "CRAWLHERD_REQUIRE_SERVICES":
            name = key[len(ENV_PREFIX) :].lower()
            if name in Settings.model_fields:
                values[name] = value
    return values


def load_settings(
    config_file: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build the settings: defaults, then the TOML file (``crawlherd.toml`` in the working directory
    when it exists, or ``config_file``), then ``CRAWLHERD_*`` variables, then ``overrides`` (flags;
    None values are ignored)."""
    values: dict[str, Any] = {}
    path = Path(config_file) if config_file else Path(DEFAULT_CONFIG_FILE)
    if config_file or path.exists():
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigurationError(f"config file {str(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
        values.update(data.get("crawlherd", data))
    values.update(_coerce_env(os.environ if env is None else env))
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigurationError(f"invalid settings: {problems}") from None
