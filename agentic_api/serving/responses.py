"""Reading and removing stored responses: retrieve (its body, or its events to replay or
follow), delete, and its input items. Creating one is ``serving.create``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentic_api.background import queue as background
from agentic_api.background.follow import follow
from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.runtime import Runtime
from agentic_api.serving.pagination import item_page
from agentic_api.serving.results import StoredEvents
from agentic_api.storage.responses import ResponseRepository
from agentic_api.turns.runner.rebuilt_events import rebuild_events
from agentic_api.wire.events import TERMINAL_STATUSES
from agentic_api.wire.reasoning_seal import sealed_reasoning, wants_sealed_reasoning


def response_not_found(response_id: str) -> ApiError:
    return ApiError(
        f"Response with id '{response_id}' not found.",
        status_code=404,
        error_type="invalid_request_error",
        code="not_found",
    )


@dataclass(frozen=True)
class FollowedEvents:
    """A background response's events: stored as they are produced, by whichever
    process runs it, and followed until its terminal event."""

    events: StoredEvents


@dataclass(frozen=True)
class StoredEventList:
    """A streamed response's stored events after the cursor."""

    events: Sequence[tuple[int, str]]


@dataclass(frozen=True)
class RebuiltEvents:
    """A response that was not streamed: its events, rebuilt from its body."""

    events: list[dict[str, Any]]


Retrieved = dict[str, Any] | FollowedEvents | StoredEventList | RebuiltEvents


async def retrieve(
    services: Runtime,
    tenant_id: str,
    response_id: str,
    *,
    stream: bool,
    starting_after: int | None,
    include: Sequence[str] = (),
) -> Retrieved:
    """The response's body, or (``stream``) its events after ``starting_after``.
    ``include`` (checked by the route): with ``reasoning.encrypted_content`` the body's
    reasoning items carry their sealed content, whatever the create asked; a replayed
    stream is the one that was sent."""
    async with services.db.read() as session:
        repo = ResponseRepository(session)
        row = await repo.get(tenant_id, response_id)
        if row is None:
            raise response_not_found(response_id)
        if not stream:
            return _with_included(row.body, include)
        if row.background:
            # Its events are stored as they are produced, by whichever process runs it.
            return FollowedEvents(follow(services.db, row.id, starting_after))
        stored = await repo.events(row.id, starting_after)
        # Nothing after the cursor may still mean a streamed response read to its end.
        was_streamed = bool(stored) or await repo.last_sequence(row.id) >= 0
    if was_streamed:
        return StoredEventList(stored)
    after = -1 if starting_after is None else starting_after
    return RebuiltEvents([e for e in rebuild_events(row.body) if e["sequence_number"] > after])


def _with_included(body: dict[str, Any], include: Sequence[str]) -> dict[str, Any]:
    if not wants_sealed_reasoning(include) or not isinstance(body.get("output"), list):
        return body
    return {**body, "output": [sealed_reasoning(item) for item in body["output"]]}


async def delete(services: Runtime, tenant_id: str, response_id: str) -> dict[str, Any]:
    """Marks the response deleted (cancelling it first while it still runs), with the
    subagents its multi-agent tree stored. A subagent is not deleted alone: it is part of
    its root's response (stored in its commit, named in its output), so it is a 400 that
    names the root to delete instead."""
    async with services.db.read() as session:
        row = await ResponseRepository(session).get(tenant_id, response_id)
    if row is not None and row.spawned_by is not None:
        raise subagent_not_deletable(response_id, row.spawned_by)
    if row is not None and row.background and row.status not in TERMINAL_STATUSES:
        # A deleted response must not keep running (and spending) in a worker.
        await background.cancel(services, tenant_id, response_id)
    async with services.db.write() as session:
        deleted = await ResponseRepository(session).mark_deleted(tenant_id, response_id)
    if deleted is None:
        raise response_not_found(response_id)
    for gone in deleted:
        services.histories.forget(gone)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


def subagent_not_deletable(response_id: str, root_id: str) -> ApiError:
    return InvalidRequest(
        f"Response '{response_id}' is a subagent of the multi-agent response '{root_id}' "
        f"and is deleted with it: delete '{root_id}' instead.",
        param="response_id",
        code="subagent_response",
    )


async def input_items(
    services: Runtime,
    tenant_id: str,
    response_id: str,
    *,
    after: str | None,
    limit: int,
    descending: bool,
    include: Sequence[str] = (),
) -> dict[str, Any]:
    """One page of the response's input items, as a list object (``include`` as for
    ``retrieve``)."""
    async with services.db.read() as session:
        repo = ResponseRepository(session)
        row = await repo.get(tenant_id, response_id)
        if row is None:
            raise response_not_found(response_id)
        after_position = None
        if after is not None:
            after_position = await repo.item_position(row.id, after)
            if after_position is None:
                raise InvalidRequest(
                    f"No input item '{after}' in this response.",
                    param="after",
                    code="invalid_value",
                )
        rows = await repo.input_items(
            row.id, after_position=after_position, limit=limit + 1, descending=descending
        )
    return item_page(rows, limit, sealed=wants_sealed_reasoning(include))


async def cancel(services: Runtime, tenant_id: str, response_id: str) -> dict[str, Any]:
    """Cancels a queued or running background response and returns it; a finished one
    comes back unchanged (the queue decides, ``background/queue.py``)."""
    return await background.cancel(services, tenant_id, response_id)
