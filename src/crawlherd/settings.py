"""One settings object for every command: defaults < ``crawlherd.toml`` < ``CRAWLHERD_*`` environment
< command-line flags. Every setting is documented in ``docs/configuration.md``.
"""

from __future__ import annotations

import difflib
import logging
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from crawlherd._redact import redact_url
from crawlherd.errors import ConfigurationError

__all__ = ["ENV_PREFIX", "Settings", "load_settings"]

ENV_PREFIX = "CRAWLHERD_"
DEFAULT_CONFIG_FILE = "crawlherd.toml"
#: ``CRAWLHERD_*`` variables that are not settings (the test suite's, and options that read their own
#: variable: the console's ports and session timeouts, the Lambda adapter's margin, allocation tracing,
#: the garbage collector's tuning); never warned about.
NOT_SETTINGS = frozenset({"REQUIRE_SERVICES", "CHROMIUM", "CHROMIUM_CDP_URL", "METRICS_PORT", "WEB_PORT", "WEB_HOST",
                          "WEB_SESSION_IDLE", "WEB_SESSION_MAX", "LAMBDA_MARGIN", "TRACEMALLOC",
                          "TRACEMALLOC_FRAMES", "TRACEMALLOC_TRIM", "USER", "GC"})
NOT_SETTINGS_PREFIXES = ("TEST_",)

log = logging.getLogger(__name__)


class Settings(BaseSettings):
    """Every knob crawlherd reads. Field names are the TOML keys; ``CRAWLHERD_<NAME>`` sets them too.

    ``Settings()`` reads, like any pydantic-settings model, the defaults < ``./crawlherd.toml`` <
    ``CRAWLHERD_*`` < keyword arguments; :func:`load_settings` does the same with a chosen file and
    environment, and says which ``CRAWLHERD_*`` variables it did not understand."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, case_sensitive=False, validate_default=True
    )

    database_url: str = Field("sqlite:///crawlherd.db", description="Config DB (SQLite file or PostgreSQL).")
    broker_url: str = Field("", description="Message broker; empty means a table in the config DB file (sqlite).")
    frontier_url: str = Field(
        "",
        description="Frontier of the workers' pages; empty means a SQLite file beside the config DB "
        "when that is SQLite (<name>-frontier.db), else memory://. Use redis://... to share it between workers.",
    )
    user_agent: str = Field("crawlherd/0.1 (+https://github.com/crawlherd/crawlherd)", description="User-Agent.")
    concurrency: int = Field(16, ge=1, le=10_000, description="crawl: requests in flight per process.")
    delay: float = Field(1.0, ge=0, description="crawl: default per-host minimum delay between requests (s).")
    max_in_flight_per_host: int = Field(2, ge=1, description="crawl: default per-host in-flight cap.")
    respect_robots: bool = Field(True, description="crawl: obey robots.txt (and its Crawl-delay).")
    allow_private_addresses: bool = Field(
        False, description="Let the fetchers reach private, loopback and link-local addresses."
    )
    runs_retention: str = Field(
        "90d", description="`crawlherd db prune`: delete job runs finished longer ago than this ('never' keeps them)."
    )
    items_retention: str = Field(
        "never", description="`crawlherd db prune`: delete items last seen longer ago than this ('never' keeps them)."
    )
    worker_concurrency: int = Field(4, ge=1, le=1000, description="worker/run: jobs in flight (and broker prefetch).")
    page_dispatcher: Literal["semaphore", "memory-adaptive"] = Field(
        "semaphore", description="worker/run: the engine dispatcher that runs every page."
    )
    page_concurrency: int = Field(8, ge=1, le=1000, description="worker/run: pages in flight at once.")
    max_attempts: int = Field(3, ge=1, le=100, description="worker/run: attempts before a job is dead.")
    backoff: float = Field(5.0, ge=0, description="worker/run: first retry delay (s), doubling per attempt.")
    dispatch_interval: float = Field(1.0, ge=0.01, description="dispatch/run: seconds between dispatch cycles.")
    dispatch_batch_size: int = Field(5000, ge=1, le=100_000, description="dispatch: targets per tick.")
    dispatch_lease: float = Field(60.0, ge=1.0, description="dispatch: outbox lease (s) of a relay's rows.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING", description="Logging level (-v and -vv raise it to INFO and DEBUG)."
    )
    status_interval: float = Field(
        10.0, ge=0.1, description="run/worker/dispatch: seconds between status lines when not on a terminal."
    )
    heartbeat_interval: float = Field(
        10.0, ge=0.1, description="worker/run: seconds between the worker's heartbeats in the config DB."
    )
    shutdown_timeout: float = Field(
        30.0, ge=0, description="worker/run: seconds the jobs in flight get at SIGTERM before they are given back."
    )
    details_stall: float = Field(
        900.0, gt=0, description="worker/run: seconds a job waits for detail pages that make no progress.",
    )
    screenshot_dir: str = Field(
        "crawlherd-screenshots",
        description="worker/run: where the screenshots of failed pages are kept, for websites with "
        "failure_screenshots (one folder per website).",
    )
    log_format: Literal["text", "json"] = Field("text", description="Log lines as text or one JSON object each.")
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto",
        description="crawl, worker, run, dispatch: the event loop; auto: uvloop when installed "
        "(the uvloop extra), else asyncio's own.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (keyword arguments) < environment < the TOML file < defaults, first one wins."""
        chosen = _CHOSEN.get()
        if chosen is None:
            path = Path(DEFAULT_CONFIG_FILE)
            file_values = _read_toml(path) if path.exists() else {}
            return init_settings, env_settings, InitSettingsSource(settings_cls, file_values)
        file_values, env = chosen
        return init_settings, _MappingEnvSource(settings_cls, env), InitSettingsSource(settings_cls, file_values)

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


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, reading a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._mapping.items()}


# (file values, environment) for the Settings being built by load_settings; None: the defaults.
_CHOSEN: ContextVar[tuple[dict[str, Any], Mapping[str, str]] | None] = ContextVar("_CHOSEN", default=None)
_warned: set[str] = set()


@contextmanager
def _choose(file_values: dict[str, Any], env: Mapping[str, str]) -> Iterator[None]:
    token = _CHOSEN.set((file_values, env))
    try:
        yield
    finally:
        _CHOSEN.reset(token)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigurationError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    values = data.get("crawlherd", data)
    return dict(values) if isinstance(values, dict) else {}


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One message per ``CRAWLHERD_*`` variable that is not a setting, naming the closest real one."""
    names = [name.upper() for name in Settings.model_fields]
    messages = []
    for key in sorted(env):
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        name = upper[len(ENV_PREFIX) :]
        if name.lower() in Settings.model_fields or name in NOT_SETTINGS or name.startswith(NOT_SETTINGS_PREFIXES):
            continue
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.7)
        hint = f"did you mean {ENV_PREFIX}{close[0]}?" if close else "the settings are listed in docs/configuration.md"
        messages.append(f"{key} is not a crawlherd setting and is ignored; {hint}")
    return messages


def warn_unknown_variables(env: Mapping[str, str], emit: Callable[[str], object]) -> None:
    """Hand each :func:`unknown_variables` message to ``emit``, once per process (load_settings runs
    several times in one command)."""
    for message in unknown_variables(env):
        if message not in _warned:
            _warned.add(message)
            emit(message)


def load_settings(
    config_file: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build the settings: defaults, then the TOML file (``crawlherd.toml`` in the working directory
    when it exists, or ``config_file``), then ``CRAWLHERD_*`` variables (``env``, default
    ``os.environ``), then ``overrides`` (flags; None values are ignored). A ``CRAWLHERD_*`` variable
    that is no setting is logged once as a warning naming the closest real one."""
    path = Path(config_file) if config_file else Path(DEFAULT_CONFIG_FILE)
    file_values = _read_toml(path) if config_file or path.exists() else {}
    environment = os.environ if env is None else env
    warn_unknown_variables(environment, log.warning)
    flags = {k: v for k, v in overrides.items() if v is not None}
    try:
        with _choose(file_values, environment):
            return Settings(**flags)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid settings: {_problems(exc)}") from None


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
