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
