"""What to tell the client when a turn's commit failed after the model ran, so that the
answer is true to what is stored.

A lost connection leaves the commit's outcome unknown: the COMMIT (or the turn store's
one-statement insert) may have landed before the connection went. So the row is read back
on a fresh connection, a few times over a few seconds, before anything is answered: stored
with the turn's status, the turn committed (its Idempotency-Key outcome with it, in the
same transaction) and the client gets the response; not stored, the client is told so
(and the key's claim is released, so a keyed retry runs the turn again); not readable,
the client is told that it could not be confirmed. A full disk rolled the transaction back
whole: nothing was stored, and storing the failure would need the disk too. Any other
failure is the database refusing this commit: the turn is stored as failed, as before.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.storage.database import Database
from agentic_api.storage.errors import (
    DatabaseBusy,
    DatabaseUnavailable,
    StorageFull,
    is_connection_lost,
    is_disk_full,
)
from agentic_api.turns.data.prepared import PreparedTurn

log = get_logger("agentic_api.turns.commit")

# Pauses between read-back attempts: a terminated backend is replaced at once, a
# restarting server takes a few seconds; the client waits at most their sum.
READBACK_PAUSES_SECONDS = (0.0, 0.25, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class CommitSettled:
    """``committed``: the turn is stored as it ended, answer it. Otherwise ``error`` is the
    answer, and ``record_failure`` says whether to store the turn as failed (only when the
    database is reachable and refused this commit)."""

    committed: bool
    error: ApiError | None = None
    record_failure: bool = False


async def settle_failed_commit(
    db: Database, turn: PreparedTurn, final: dict[str, Any], exc: BaseException
) -> CommitSettled:
    if is_disk_full(exc):
        log.warning("commit failed: disk full, nothing stored", response_id=turn.response_id)
        return CommitSettled(
            False,
            StorageFull(
                "The response could not be saved: the database's disk is full. Nothing of "
                "it was stored; retry the request once space has been freed."
            ),
        )
    if not is_connection_lost(exc):
        log.error(
            "commit failed", response_id=turn.response_id, cause=type(exc).__name__, exc_info=exc
        )
        return CommitSettled(
            False,
            ApiError(
                "The response could not be saved; it was stored as failed and cannot be "
                f"continued ({type(exc).__name__}).",
                status_code=500,
                code="commit_failed",
            ),
            record_failure=True,
        )
    status = await _read_back(db, turn)
    if status == final["status"]:
        log.warning(
            "commit outcome unknown; read back: stored",
            response_id=turn.response_id,
            status=status,
        )
        return CommitSettled(True)
    if status is _UNREADABLE:
        log.warning("commit outcome unknown; read back failed", response_id=turn.response_id)
        return CommitSettled(
            False,
            DatabaseUnavailable(
                "The connection to the database was lost while the response was being "
                "saved, and the database did not answer afterwards: whether it was saved "
                f"is unknown. Retrieve response '{turn.response_id}' later, or retry with "
                "the same Idempotency-Key (which answers the stored response if it was "
                "saved)."
            ),
        )
    log.warning(
        "commit outcome unknown; read back: not stored",
        response_id=turn.response_id,
        status=status,
    )
    return CommitSettled(
        False,
        DatabaseUnavailable(
            "The connection to the database was lost while the response was being saved, "
            "and it was not saved: its output is lost and it cannot be continued. Retry "
            "the request."
        ),
    )


class _Unreadable:
    """The read-back never reached the database."""


_UNREADABLE = _Unreadable()


async def _read_back(db: Database, turn: PreparedTurn) -> str | _Unreadable | None:
    """The stored status of the turn's row (``None``: no such row)."""
    for pause in READBACK_PAUSES_SECONDS:
        await asyncio.sleep(pause)
        try:
            row = await db.turns.checkpoint(turn.caller.tenant_id, turn.response_id)
        except (DatabaseUnavailable, DatabaseBusy):
            continue
        return None if row is None else row.status
    return _UNREADABLE
