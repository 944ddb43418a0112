"""Integration fixtures: ``engine``, a migrated SQLite config DB of the test's own (the service and
console packages offer their own, on SQLite and PostgreSQL)."""

from tests.support.fixtures import engine

__all__ = ["engine"]
