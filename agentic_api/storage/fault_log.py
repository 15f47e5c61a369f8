"""Logging a failed database step without a traceback per statement while the database is
away: a lost connection, a held lock and a full disk are the database's state, already
logged once with their cause where they were recognized (``storage/timing.py``), so the
step that met one says so in one line; anything else is a bug and keeps its traceback."""

from __future__ import annotations

from typing import Any

import structlog

from agentic_api.storage.errors import DatabaseBusy, DatabaseUnavailable, StorageFull

DATABASE_STATES = (DatabaseUnavailable, DatabaseBusy, StorageFull)


def log_step_failure(
    log: structlog.stdlib.BoundLogger, message: str, exc: BaseException, **fields: Any
) -> None:
    if isinstance(exc, DATABASE_STATES):
        log.warning(message, cause=exc.code, **fields)
    else:
        log.error(message, exc_info=exc, **fields)
