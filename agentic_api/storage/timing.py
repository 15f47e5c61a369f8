"""The one wrapper around every transaction we run, whichever way it reaches the database
(SQLAlchemy sessions in ``storage/database.py``, the turn store's driver connections in
``storage/turn_store/``): its duration by kind, the statements it sent when the caller
counts them itself, and a lock that stayed held past the busy timeout, a lost connection
and a full disk as 503s (each logged once here, with its cause, without a traceback: they
are the database's state, not a bug of ours)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.metrics import DB_STATEMENTS, DB_TRANSACTION_DURATION
from agentic_api.storage.errors import (
    DatabaseBusy,
    DatabaseUnavailable,
    StorageFull,
    is_busy,
    is_connection_lost,
    is_disk_full,
)

log = get_logger("agentic_api.storage")

TransactionKind = Literal["read", "write"]


@contextmanager
def timed_transaction(kind: TransactionKind, *, statements: int = 0) -> Iterator[None]:
    """``statements``: how many the block sends, for callers that bypass SQLAlchemy's
    execution (whose statements are counted as they run, ``storage/database.py``)."""
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        if isinstance(exc, ApiError):
            raise
        if is_busy(exc):
            raise DatabaseBusy() from exc
        if is_disk_full(exc):
            log.warning("database disk full", kind=kind, cause=_cause(exc))
            raise StorageFull() from exc
        if is_connection_lost(exc):
            log.warning("database connection lost", kind=kind, cause=_cause(exc))
            raise DatabaseUnavailable() from exc
        raise
    finally:
        if statements:
            DB_STATEMENTS.inc(statements)
        DB_TRANSACTION_DURATION.labels(kind).observe(time.perf_counter() - started)


def _cause(exc: BaseException) -> str:
    # SQLAlchemy's message carries the statement and its parameters; the driver's
    # own error says what happened.
    orig = getattr(exc, "orig", None) or exc
    return f"{type(orig).__name__}: {str(orig).splitlines()[0] if str(orig) else ''}"
