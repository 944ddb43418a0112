"""What the config DB's SQL dialect can do, as flags computed once per engine (APScheduler 4's way).

Code that writes SQL for both SQLite and PostgreSQL asks for a capability, never for the dialect's
name::

    sql = sql_capabilities(engine)        # or a connection; the same object for every call
    if sql.array_params:                  # one array parameter for n values (PostgreSQL)
        ...

The flags are derived from the SQLAlchemy dialect the first time it is asked about, and kept with it
(an engine has one dialect instance; its connections share it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

__all__ = ["SQLCapabilities", "sql_capabilities"]


@dataclass(frozen=True, slots=True)
class SQLCapabilities:
    """The SQL features crawlherd uses where its two dialects differ."""

    #: The dialect's name (``"sqlite"``, ``"postgresql"``): for messages, not for decisions.
    name: str
    #: SQLite: one writer at a time (``BEGIN IMMEDIATE``), ``strftime`` for the clock, no row locks.
    is_sqlite: bool
    #: ``FOR UPDATE SKIP LOCKED`` takes row locks that concurrent transactions pass over.
    skip_locked: bool
    #: ``INSERT`` / ``UPDATE ... RETURNING``.
    returning: bool
    #: ``INSERT ... ON CONFLICT DO NOTHING / DO UPDATE`` (through :attr:`insert`).
    on_conflict: bool
    #: One array parameter stands for n values (``unnest(:ids)``, ``= ANY(:ids)``): one statement,
    #: prepared once, whatever the number of rows.
    array_params: bool
    #: A transaction may ask for plans made for its parameters (``plan_cache_mode``).
    plan_cache_mode: bool
    #: Datetimes are stored without their zone (they are stored as UTC, naive).
    naive_datetimes: bool
    #: The dialect's ``insert`` construct, with ``on_conflict_do_nothing`` / ``on_conflict_do_update``.
    insert: Callable[..., Any]


_KNOWN: WeakKeyDictionary[Dialect, SQLCapabilities] = WeakKeyDictionary()


def sql_capabilities(bind: Any) -> SQLCapabilities:
    """The capabilities of ``bind``'s dialect: ``bind`` is an engine or a connection (sync or async)
    or a :class:`~sqlalchemy.engine.Dialect`. Computed on the first call for a dialect, then reused."""
    dialect: Dialect = bind if isinstance(bind, Dialect) else bind.dialect
    found = _KNOWN.get(dialect)
    if found is None:
        found = _KNOWN[dialect] = _derive(dialect)
    return found


def _derive(dialect: Dialect) -> SQLCapabilities:
    postgres = dialect.name == "postgresql"
    is_sqlite = dialect.name == "sqlite"
    return SQLCapabilities(
        name=dialect.name,
        is_sqlite=is_sqlite,
        skip_locked=postgres,
        returning=bool(dialect.insert_returning and dialect.update_returning),
        on_conflict=postgres or is_sqlite,
        array_params=postgres,
        plan_cache_mode=postgres,
        naive_datetimes=is_sqlite,
        insert=postgresql.insert if postgres else sqlite.insert,
    )
