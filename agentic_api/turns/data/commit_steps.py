"""What a turn's commit does beyond storing the turn, declared by whoever runs it.

The commit is the turn's one transaction; anything that must be true exactly when the
turn is stored (an Idempotency-Key's outcome, a background job's end) is a step run
inside it, so a crash or a refused commit leaves both or neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from agentic_api.storage.models import Response


class CommitStep(Protocol):
    async def __call__(self, session: AsyncSession, row: Response) -> None:
        """Runs inside the commit's transaction after the turn's rows are written;
        raising rolls the whole turn back."""


class EventLog(Protocol):
    """Storage a turn's events already go to while it runs (a background job's)."""

    async def unsaved(self, events: Sequence[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        """Stops storing on its own and returns those of ``events`` (``(sequence_number,
        json)``) it has not stored, which the commit then stores (so none is written
        twice)."""


@dataclass(frozen=True)
class CommitHooks:
    """What whoever runs a turn attaches to its commit: the steps it runs, and where the
    turn's events are already being stored (a background job's log)."""

    steps: tuple[CommitStep, ...] = ()
    event_log: EventLog | None = None


NO_HOOKS = CommitHooks()
