"""Errors the storage layer raises for callers to render."""

from __future__ import annotations

from agentic_api.errors import ApiError


class DatabaseBusy(ApiError):
    """A lock stayed held past the busy timeout: the request may simply be retried."""

    status_code = 503
    error_type = "server_error"
    code = "database_busy"

    def __init__(self, message: str = "the database is busy; retry the request") -> None:
        super().__init__(message)


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
