"""Everything a turn needs before the model is called: lineage, verified history,
fingerprint and the exact upstream request."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentic_api.errors import InvalidRequest
from agentic_api.storage.database import Database
from agentic_api.storage.models import Response
from agentic_api.storage.responses import ResponseRepository
from agentic_api.turns.errors import (
    previous_response_not_continuable,
    previous_response_not_found,
)
from agentic_api.turns.history import load_history
from agentic_api.turns.render import render_body, upstream_fields, upstream_headers
from agentic_api.wire.items import Item, normalize_input, to_item
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.response_object import base_response
from lineage import (
    ExecutionFingerprint,
    FingerprintChange,
    IdKind,
    ParentLineage,
    ResponseLineage,
    mint_id,
    resolve_lineage,
)

CONTINUABLE = frozenset({"completed", "incomplete"})


@dataclass(frozen=True)
class Caller:
    """The authenticated tenant, as the turn pipeline needs it."""

    tenant_id: str
    salt_epoch: int
    cache_salt: str = field(repr=False)


@dataclass
class PreparedTurn:
    caller: Caller
    request: CreateResponseRequest
    response_id: str
    created_at: int
    lineage: ResponseLineage
    parent: Response | None
    history: list[Item]
    new_input: list[Item]
    fingerprint: ExecutionFingerprint
    fingerprint_changes: list[FingerprintChange]
    base: dict[str, Any]
    body: bytes
    headers: dict[str, str]
    conversation_id: str | None = None

    @property
    def prompt_items(self) -> list[Item]:
        return [*self.history, *self.new_input]


async def prepare_turn(
    db: Database, caller: Caller, request: CreateResponseRequest
) -> PreparedTurn:
    response_id = mint_id(IdKind.RESPONSE)
    new_input = [to_item(v) for v in normalize_input(request.input, assign_ids=request.store)]
    parent: Response | None = None
    history: list[Item] = []
    if request.previous_response_id is not None:
        async with db.read() as session:
            repo = ResponseRepository(session)
            parent = await repo.get(caller.tenant_id, request.previous_response_id)
            if parent is None or not parent.store:
                raise previous_response_not_found(request.previous_response_id)
            if parent.status not in CONTINUABLE:
                raise previous_response_not_continuable(parent.id, parent.status)
            history = await load_history(repo, parent)
    check_tool_outputs(history, new_input)

    lineage = resolve_lineage(
        tenant_id=caller.tenant_id,
        response_id=response_id,
        parent=(ParentLineage(parent.id, parent.session_id, parent.depth) if parent else None),
        prompt_cache_key=request.prompt_cache_key,
        first_items=[item.data for item in (history or new_input)],
    )
    fingerprint = ExecutionFingerprint.build(
        model=request.model,
        instructions=request.instructions,
        tools=request.tools,
        tool_choice=request.tool_choice,
        parallel_tool_calls=request.parallel_tool_calls,
        text=request.text,
        reasoning=request.reasoning,
        truncation=request.truncation,
        salt_epoch=caller.salt_epoch,
    )
    changes = fingerprint.diff(ExecutionFingerprint.from_dict(parent.fingerprint)) if parent else []
    created_at = int(time.time())
    fields = upstream_fields(request, cache_salt=caller.cache_salt)
    prompt = [*history, *new_input]
    return PreparedTurn(
        caller=caller,
        request=request,
        response_id=response_id,
        created_at=created_at,
        lineage=lineage,
        parent=parent,
        history=history,
        new_input=new_input,
        fingerprint=fingerprint,
        fingerprint_changes=changes,
        base=base_response(
            request, response_id=response_id, created_at=created_at, conversation_id=None
        ),
        body=render_body(fields, prompt),
        headers=upstream_headers(lineage),
    )


def check_tool_outputs(history: list[Item], new_input: list[Item]) -> None:
    """A tool output must answer a call the model actually made (in history or input)."""
    if not any(item.type.endswith("_output") for item in new_input):
        return
    calls: set[str] = set()
    for position, item in enumerate([*history, *new_input]):
        value = item.as_dict()
        call_id = value.get("call_id")
        if not isinstance(call_id, str):
            continue
        if item.type.endswith("_output"):
            if call_id not in calls:
                index = position - len(history)
                raise InvalidRequest(
                    f"No tool call found for {item.type} with call_id '{call_id}'.",
                    param=f"input[{index}].call_id" if index >= 0 else "input",
                    code="tool_call_not_found",
                )
        else:
            calls.add(call_id)
