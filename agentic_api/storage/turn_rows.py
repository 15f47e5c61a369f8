"""A turn's own rows, defined once: the values of its ``responses`` row, its items' and
events' columns and values, its token artifact's, and the checkpoint read of a parent.

Two writers produce these rows — the repositories through SQLAlchemy
(``storage/responses.py``) and the turn store's compiled statements
(``storage/turn_store/statements.py``) — and they must write the same rows
(``tests/storage/test_turn_store.py``). So both build them here, and neither lists the
columns itself. It sits below both because the turn store's reference implementation uses
the repositories.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import bindparam, select

from agentic_api.storage.models import Response, ResponseEvent, ResponseItem, TokenArtifactRow


@dataclass(frozen=True)
class NewItem:
    """An item of a turn about to be stored (its position is its place in the turn)."""

    item_id: str
    role: str
    type: str
    data: str


RESPONSE_COLUMNS: frozenset[str] = frozenset(column.key for column in Response.__table__.columns)
# Every column of the item and event rows, in table order: what an insert sets.
ITEM_COLUMNS: tuple[str, ...] = tuple(column.key for column in ResponseItem.__table__.columns)
EVENT_COLUMNS: tuple[str, ...] = tuple(column.key for column in ResponseEvent.__table__.columns)
# The columns an item or event row copies from its response's row (the rest are its own).
COPIED_FROM_RESPONSE: Mapping[str, str] = {"response_id": "id", "tenant_id": "tenant_id"}


def response_values(row: Response) -> dict[str, Any]:
    """The columns set on ``row``; the others take their defaults, as with ``session.add``."""
    return {key: value for key, value in vars(row).items() if key in RESPONSE_COLUMNS}


def item_values(
    response_id: str, tenant_id: str, first_position: int, items: Sequence[NewItem]
) -> list[dict[str, Any]]:
    """One row of ``ITEM_COLUMNS`` per item, numbered from ``first_position``."""
    return [
        {
            "response_id": response_id,
            "position": position,
            "tenant_id": tenant_id,
            "item_id": item.item_id,
            "role": item.role,
            "type": item.type,
            "data": item.data,
        }
        for position, item in enumerate(items, start=first_position)
    ]


class StoredEventsCorrupt(ValueError):
    """A stored run of events does not hold as many events as its numbers say."""


# An event to store: ``(sequence_number, json)``. A committing turn passes the JSON bytes its
# events were published with; other writers pass text.
EventJson = tuple[int, str] | tuple[int, bytes]


def event_values(response_id: str, events: Sequence[EventJson]) -> list[dict[str, Any]]:
    """The rows of ``EVENT_COLUMNS`` for events ``(sequence_number, json)``: one row per run
    of consecutive numbers, the events' JSON joined by newlines. orjson (and any JSON
    encoder's compact output) writes no raw newline, so the join is unambiguous; one row
    instead of one per event is most of what storing a streamed turn used to cost. A run
    given as bytes is joined as bytes and decoded once (not once per event: that was a
    fifth of a streamed turn's commit, docs/benchmarks/streaming/README.md)."""
    rows: list[dict[str, Any]] = []
    start = 0
    for index in range(1, len(events) + 1):
        if index < len(events) and events[index][0] == events[index - 1][0] + 1:
            continue
        run = events[start:index]
        rows.append(
            {
                "response_id": response_id,
                "sequence_number": run[0][0],
                "last_sequence_number": run[-1][0],
                "data": _joined(run),
            }
        )
        start = index
    return rows


def _joined(run: Sequence[EventJson]) -> str:
    first = run[0][1]
    if len(run) == 1:
        return first.decode() if isinstance(first, bytes) else first
    jsons = [json for _, json in run]
    # (One writer's events are all bytes or all text.)
    if isinstance(first, bytes):
        return b"\n".join(cast("list[bytes]", jsons)).decode()
    return "\n".join(cast("list[str]", jsons))


def stored_events(
    rows: Sequence[tuple[int, int | None, str]], after: int | None
) -> list[tuple[int, str]]:
    """The events ``(sequence_number, json)`` that stored rows ``(sequence_number,
    last_sequence_number, data)`` hold, those numbered after ``after`` only."""
    floor = -1 if after is None else after
    events: list[tuple[int, str]] = []
    for first, last, data in rows:
        if last is None or last == first:
            if first > floor:
                events.append((first, data))
            continue
        pieces = data.split("\n")
        if len(pieces) != last - first + 1:
            raise StoredEventsCorrupt(f"events {first}..{last} are stored as {len(pieces)} pieces")
        skip = max(0, floor + 1 - first)
        events.extend((first + offset, piece) for offset, piece in enumerate(pieces[skip:], skip))
    return events


_LIVE = (
    Response.id == bindparam("response_id"),
    Response.tenant_id == bindparam("tenant_id"),
    Response.deleted_at.is_(None),
)
LIVE_RESPONSE = select(Response).where(*_LIVE)
# A live response of a tenant without its stored object, request and token account (what
# a continuation reads of its parent; those documents are the largest part of the row).
_NOT_IN_CHECKPOINT = frozenset({"body", "request", "token_account"})
LIVE_CHECKPOINT = select(
    *(column for column in Response.__table__.columns if column.key not in _NOT_IN_CHECKPOINT)
).where(*_LIVE)


# Every column, in the order the turn store binds them (storage/turn_store/statements.py).
ARTIFACT_KEYS = tuple(column.key for column in TokenArtifactRow.__table__.columns)


def artifact_values(row: TokenArtifactRow) -> dict[str, Any]:
    return {key: getattr(row, key) for key in ARTIFACT_KEYS}
