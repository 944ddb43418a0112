"""The config DB's boundary: driver exceptions become :class:`~crawlherd.errors.BackendUnavailableError`.

Like httpx's ``map_exceptions``: every place that talks to the config DB wraps the call in
:func:`translate_db_errors`, so callers see one typed error, with what was being done and the
driver's own first line, and never a SQLAlchemy or asyncpg traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from crawlherd.errors import BackendUnavailableError, CrawlherdError, summarize

__all__ = ["is_db_unavailable", "translate_db_errors"]


def is_db_unavailable(exc: BaseException) -> bool:
    """True for the failures that mean "the database cannot be used right now" (connection refused
    or lost, server shutting down, locked past the busy timeout), as opposed to a bug."""
    return isinstance(exc, OperationalError | InterfaceError | DBAPIError | OSError | ConnectionError)


@contextmanager
def translate_db_errors(doing: str) -> Iterator[None]:
    """Re-raise a database outage inside the block as ``BackendUnavailableError("config DB failed
    <doing>: <summary>", backend="database")``; crawlherd's own errors and bugs pass unchanged."""
    try:
        yield
    except CrawlherdError:
        raise
    except Exception as exc:
        if is_db_unavailable(exc):
            raise BackendUnavailableError(f"config DB failed {doing}: {summarize(exc)}", backend="database") from exc
        raise
