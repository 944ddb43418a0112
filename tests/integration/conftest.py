"""Integration fixtures: ``engine``, a migrated SQLite config DB of the test's own (the service and
console packages offer their own, on SQLite and PostgreSQL); ``demo_pipeline``, a demo site and a config
DB with its targets due, for the ``crawlherd`` commands."""

from tests.support.cli import demo_pipeline
from tests.support.fixtures import config_db, engine

__all__ = ["config_db", "demo_pipeline", "engine"]
