"""What serving a request returns, for a route to render."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agentic_api.background.follow import follow
from agentic_api.storage.database import Database
from agentic_api.storage.idempotency import Outcome
from agentic_api.turns.prewarm import Prewarmed
from agentic_api.turns.run import TurnStream
from agentic_api.turns.runner.channel import Published, ReaderGone

# A streamed turn's types are named here too, so a route renders one without importing turns/.
__all__ = [
    "Final",
    "Prewarmed",
    "Published",
    "Queued",
    "ReaderGone",
    "Replayed",
    "Streaming",
    "TurnStream",
    "replayed",
]

StoredEvents = AsyncIterator[tuple[int, str]]


@dataclass(frozen=True)
class Replayed:
    """An earlier request with this Idempotency-Key ended so, and nothing ran now: its
    JSON status and body, or (``events``) the response's stored events, followed while
    it still runs."""

    status_code: int
    body: dict[str, Any] | None
    events: StoredEvents | None


@dataclass(frozen=True)
class Queued:
    """A background response, stored ``queued``; ``events`` when the client follows it."""

    response: dict[str, Any]
    events: StoredEvents | None


@dataclass(frozen=True)
class Streaming:
    """A streamed turn under way, its upstream request accepted."""

    stream: TurnStream


@dataclass(frozen=True)
class Final:
    """A turn run to its end: the Response object."""

    response: dict[str, Any]


def replayed(db: Database, outcome: Outcome) -> Replayed:
    if outcome.kind == "stream" and outcome.response_id is not None:
        return Replayed(outcome.status_code, None, follow(db, outcome.response_id, None))
    return Replayed(outcome.status_code, outcome.body, None)
