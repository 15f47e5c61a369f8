"""The settings every SQLite connection of ours runs with, in one list: SQLAlchemy's
connections (``storage/engine.py``) and the turn store's plain sqlite3 ones
(``storage/turn_store/sqlite.py``) must agree, or one of them would, say, skip foreign
keys or fsync differently."""

from __future__ import annotations

# How long a writer waits for another connection's write lock before SQLITE_BUSY.
SQLITE_BUSY_TIMEOUT_MS = 10_000


def connection_pragmas(
    *, busy_timeout_ms: int, read_only: bool = False, folds_wal: bool = True
) -> list[str]:
    """``read_only``: the connection refuses writes (``query_only``), for connections whose
    statements run on the event loop's thread, which must never wait on an fsync.
    ``folds_wal=False``: this connection's commits never fold the WAL back into the file (someone
    else does, off the critical path)."""
    pragmas = [
        "PRAGMA journal_mode=WAL",
        "PRAGMA foreign_keys=ON",
        f"PRAGMA busy_timeout={busy_timeout_ms}",
        "PRAGMA synchronous=NORMAL",
    ]
    if read_only:
        pragmas.append("PRAGMA query_only=ON")
    if not folds_wal:
        pragmas.append("PRAGMA wal_autocheckpoint=0")
    return pragmas
