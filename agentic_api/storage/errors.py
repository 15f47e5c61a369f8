"""Errors the storage layer raises for callers to render, and how to recognize a lock that
stayed held (on every path to the database: SQLAlchemy, sqlite3, asyncpg)."""

from __future__ import annotations

import sqlite3

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
