"""The config DB's boundary: driver exceptions become :class:`~crawlherd.errors.BackendUnavailableError`.

Like httpx's ``map_exceptions``: every place that talks to the config DB wraps the call in
:func:`translate_db_errors`, so callers see one typed error, with what was being done and the
driver's own first line, and never a SQLAlchemy or asyncpg traceback.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

from crawlherd._redact import redact_url
from crawlherd.errors import BackendUnavailableError, CrawlherdError, summarize

__all__ = ["describe_db_error", "is_db_unavailable", "translate_db_errors"]


def is_db_unavailable(exc: BaseException) -> bool:
    """True for the failures that mean "the database cannot be used right now" (connection refused
    or lost, server shutting down, locked past the busy timeout), as opposed to a bug -- or to a
    constraint the statement broke (an :class:`~sqlalchemy.exc.IntegrityError`: no retry can help)."""
    if isinstance(exc, IntegrityError):
        return False
    return isinstance(exc, OperationalError | InterfaceError | DBAPIError | OSError | ConnectionError)


#: SQLSTATE codes: invalid_catalog_name; invalid_authorization_specification, invalid_password.
_NO_SUCH_DATABASE = "3D000"
_LOGIN_REFUSED = ("28000", "28P01")


def describe_db_error(exc: BaseException) -> str:
    """What went wrong, in the operator's words: the database is missing, the login was refused, the
    server cannot be reached or its host name is unknown; else the driver's first line."""
    root: BaseException = exc
    while not isinstance(root, TimeoutError):  # SQLAlchemy wraps the adapter's error, which wraps the driver's
        inner = getattr(root, "orig", None) or root.__cause__
        if inner is None or inner is root:
            break
        root = inner
    text = str(root).strip().splitlines()[0] if str(root).strip() else type(root).__name__
    sqlstate = getattr(root, "sqlstate", None)  # the server's SQLSTATE code (asyncpg's errors carry it)
    if sqlstate == _NO_SUCH_DATABASE:
        return f"the database does not exist ({text}); create it (createdb NAME) or fix the URL"
    if sqlstate in _LOGIN_REFUSED:
        return f"the server refused the login ({text}); check the user and password in the URL"
    if isinstance(root, socket.gaierror):
        return f"unknown host ({text}); check the host name in the URL"
    if isinstance(root, ConnectionRefusedError):
        return f"nothing answers at that address ({text}); is the server running, and is the port right?"
    if isinstance(root, TimeoutError):
        return "the server did not answer in time; is it reachable from here?"
    return summarize(root)


@contextmanager
def translate_db_errors(doing: str, *, url: str | None = None) -> Iterator[None]:
    """Re-raise a database outage inside the block as ``BackendUnavailableError("config DB [<url>]
    failed <doing>: <what went wrong>", backend="database", role="database")`` (``url`` redacted);
    crawlherd's own errors, bugs and broken constraints pass unchanged."""
    try:
        yield
    except CrawlherdError:
        raise
    except Exception as exc:
        if is_db_unavailable(exc):
            where = f"config DB {redact_url(url)}" if url else "config DB"
            message = f"{where} failed {doing}: {describe_db_error(exc)}"
            raise BackendUnavailableError(message, backend="database", role="database") from exc
        raise
