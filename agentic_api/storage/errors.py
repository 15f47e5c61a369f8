"""Errors the storage layer raises for callers to render, and how to recognize what the
database said (on every path to it: SQLAlchemy, sqlite3, asyncpg): a lock that stayed
held, a connection that was lost, a disk that is full."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator

from sqlalchemy.exc import DBAPIError

from agentic_api.errors import ApiError

# PostgreSQL's lock_not_available: a lock_timeout (or NOWAIT) gave up waiting.
_PG_LOCK_NOT_AVAILABLE = "55P03"


class DatabaseBusy(ApiError):
    """A lock stayed held past the busy timeout: the request may simply be retried."""

    status_code = 503
    error_type = "server_error"
    code = "database_busy"

    def __init__(self, message: str = "the database is busy; retry the request") -> None:
        super().__init__(message)


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is a database refusing because another connection holds a lock:
    SQLite's BUSY or LOCKED, PostgreSQL's lock timeout; through SQLAlchemy or not."""
    if isinstance(exc, DBAPIError):
        return exc.orig is not None and is_busy(exc.orig)
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        return "database is locked" in str(exc)
    # asyncpg's errors, and SQLAlchemy's adapter's wrapping of them, carry the SQLSTATE.
    return getattr(exc, "sqlstate", None) == _PG_LOCK_NOT_AVAILABLE


# PostgreSQL aborts these transactions whole: serialization_failure, deadlock_detected.
_ABORTED_SQLSTATES = frozenset({"40001", "40P01"})


def nothing_written(exc: BaseException) -> bool:
    """Whether ``exc`` proves its transaction wrote nothing, so that running it again is
    safe: a lock that was never granted (``DatabaseBusy``) or a transaction PostgreSQL
    aborted whole. Any other failure (a lost connection: the commit may have landed)
    is not retried."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DatabaseBusy):
            return True
        for candidate in (seen, getattr(seen, "orig", None)):
            if getattr(candidate, "sqlstate", None) in _ABORTED_SQLSTATES:
                return True
        seen = seen.__cause__
    return False


class DatabaseUnavailable(ApiError):
    """The connection to the database was lost or could not be made (a server restart, a
    terminated backend, a network failure): nothing this request asked was done unless
    the caller proves otherwise (a commit in flight may have landed; see
    ``turns/runner/commit_readback.py``)."""

    status_code = 503
    error_type = "server_error"
    code = "database_unavailable"

    def __init__(
        self, message: str = "the database is unavailable; retry the request shortly"
    ) -> None:
        super().__init__(message)


class StorageFull(ApiError):
    """The database's disk is full: the transaction was rolled back whole."""

    status_code = 503
    error_type = "server_error"
    code = "storage_full"

    def __init__(
        self, message: str = "the database's disk is full; nothing was stored, retry later"
    ) -> None:
        super().__init__(message)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, what SQLAlchemy wrapped (``orig``) and what it was raised from."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for linked in (getattr(current, "orig", None), current.__cause__, current.__context__):
            if isinstance(linked, BaseException):
                pending.append(linked)


# SQLSTATE classes and codes that mean the session is gone: 08 connection_exception;
# admin_shutdown (pg_terminate_backend, a fast shutdown), crash_shutdown,
# cannot_connect_now (a server still starting).
_PG_CONNECTION_CLASS = "08"
_PG_SESSION_ENDED = frozenset({"57P01", "57P02", "57P03"})
_PG_DISK_FULL = "53100"


def _asyncpg_connection_errors() -> tuple[type[BaseException], ...]:
    # Looked up only when asyncpg is loaded: a SQLite server never imports it, and no
    # asyncpg error can exist before it is.
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is None:
        return ()
    exceptions = asyncpg.exceptions
    return (
        # "connection is closed", "another operation is in progress": the protocol
        # cannot be trusted with another statement.
        exceptions.InterfaceError,
        # "cannot switch to state N": a previous operation never finished.
        exceptions.InternalClientError,
        exceptions.PostgresConnectionError,
    )


def is_connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection it came from is unusable (lost, closed by the
    server, or left mid-operation), so the connection must be discarded and what was in
    flight on it has an unknown outcome."""
    client_errors = _asyncpg_connection_errors()
    for seen in _chain(exc):
        if isinstance(seen, DatabaseUnavailable):
            return True
        if isinstance(seen, DBAPIError) and seen.connection_invalidated:
            return True
        if isinstance(seen, OSError) and not isinstance(seen, sqlite3.Error):
            return True
        if client_errors and isinstance(seen, client_errors):
            return True
        sqlstate = getattr(seen, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate.startswith(_PG_CONNECTION_CLASS) or sqlstate in _PG_SESSION_ENDED
        ):
            return True
    return False


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the database refusing a write for want of disk: SQLite's FULL,
    PostgreSQL's disk_full. Either way the transaction was rolled back whole."""
    for seen in _chain(exc):
        if isinstance(seen, StorageFull):
            return True
        if isinstance(seen, sqlite3.Error):
            code = getattr(seen, "sqlite_errorcode", None)
            if code is not None and (code & 0xFF) == sqlite3.SQLITE_FULL:
                return True
            if "database or disk is full" in str(seen):
                return True
        if getattr(seen, "sqlstate", None) == _PG_DISK_FULL:
            return True
    return False
