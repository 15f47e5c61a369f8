"""The one wrapper around every transaction we run, whichever way it reaches the database
(SQLAlchemy sessions in ``storage/database.py``, the turn store's driver connections in
``storage/turn_store/``): its duration by kind, the statements it sent when the caller
counts them itself, and a lock that stayed held past the busy timeout as a 503."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from agentic_api.metrics import DB_STATEMENTS, DB_TRANSACTION_DURATION
from agentic_api.storage.errors import DatabaseBusy, is_busy

TransactionKind = Literal["read", "write"]


@contextmanager
def timed_transaction(kind: TransactionKind, *, statements: int = 0) -> Iterator[None]:
    """``statements``: how many the block sends, for callers that bypass SQLAlchemy's
    execution (whose statements are counted as they run, ``storage/database.py``)."""
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        if is_busy(exc):
            raise DatabaseBusy() from exc
        raise
    finally:
        if statements:
            DB_STATEMENTS.inc(statements)
        DB_TRANSACTION_DURATION.labels(kind).observe(time.perf_counter() - started)
