"""Everything a turn needs before the model is called: lineage, verified history,
fingerprint and the exact upstream request."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentic_api import tracing
from agentic_api.errors import InvalidRequest
from agentic_api.mcp.specs import McpServer, has_secrets, parse_servers, redact_tools
from agentic_api.runtime import Runtime
from agentic_api.storage.database import Database
from agentic_api.storage.models import Response
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.verified_histories import VerifiedHistories
from agentic_api.turns.data.caller import Caller, Reservation
from agentic_api.turns.data.prepared import CONTINUABLE, ConversationState, PreparedTurn
from agentic_api.turns.prepare.approvals import resolve_approvals
from agentic_api.turns.prepare.connection_histories import ConnectionHistories
from agentic_api.turns.prepare.conversation import load_conversation
from agentic_api.turns.prepare.errors import (
    previous_response_not_continuable,
    previous_response_not_found,
)
from agentic_api.turns.prepare.history import load_history, load_history_since
from agentic_api.turns.prepare.prewarm_request import for_prewarm
from agentic_api.turns.prepare.render import (
    add_agentic_context,
    agentic_context_of,
    render_body,
    upstream_fields,
    upstream_headers,
)
from agentic_api.turns.prepare.summary_request import (
    compact_threshold,
    compacted_window,
    requests_compaction,
    summary_body,
)
from agentic_api.wire.conversations import check_unique_ids
from agentic_api.wire.items import Item, normalize_input, to_item
from agentic_api.wire.multi_agent_tools import TOOLS as ACTION_TOOLS
from agentic_api.wire.reasoning_context import sent_items
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.response_object import base_response
from lineage import (
    CONTENT_SESSION_ITEMS,
    ExecutionFingerprint,
    IdKind,
    ParentLineage,
    mint_id,
    resolve_lineage,
)


async def prepare_turn(
    services: Runtime,
    caller: Caller,
    request: CreateResponseRequest,
    *,
    local: ConnectionHistories | None = None,
    reservation: Reservation | None = None,
) -> PreparedTurn:
    """``local``: a WebSocket connection's own histories, consulted before this process's
    verified histories (``services.histories``) and both before the items in storage.
    ``reservation``: the id, creation time and input a background job was enqueued with.
    The upstream request carries the session tags and (when configured) the router's
    program-scheduling hints that ``services`` holds."""
    request, mcp_servers = _without_secrets(request)
    if reservation is not None:
        response_id, new_input = reservation.response_id, list(reservation.new_input)
    else:
        response_id = mint_id(IdKind.RESPONSE)
        new_input = [to_item(v) for v in normalize_input(request.input, assign_ids=request.store)]
    with tracing.span("rehydrate") as rehydrating:
        continued = await _continued(services, caller, request, new_input, local)
        rehydrating.set_attribute("agentic.history.items", len(continued.history))
    history, parent = continued.history, continued.parent
    check_tool_outputs(history, new_input)
    approvals = resolve_approvals(history, new_input)
    compacts = requests_compaction(new_input)
    if compacts and approvals:
        raise InvalidRequest(
            "A compacting turn only summarizes; answer the approval requests in a turn "
            "of their own.",
            param="input",
            code="invalid_value",
        )
    if approvals and request.runs_agents:
        # Refused here, before a background request is queued: a tree's agents never
        # pause for approvals (turns/kinds/multi_agent/gateway.py).
        raise InvalidRequest(
            "Approval responses cannot be answered by a multi-agent response on this "
            "server: its agents do not pause for approvals. Answer them without "
            "multi_agent.",
            param=f"{approvals[0].param}.approval_request_id",
            code="unsupported_parameter",
        )

    lineage = resolve_lineage(
        tenant_id=caller.tenant_id,
        response_id=response_id,
        conversation_id=request.conversation_id,
        parent=continued.link,
        prompt_cache_key=request.prompt_cache_key,
        first_items=[item.data for item in (history or new_input)[:CONTENT_SESSION_ITEMS]],
    )
    fingerprint = ExecutionFingerprint.build(
        model=request.model,
        instructions=request.instructions,
        tools=fingerprinted_tools(request),
        tool_choice=request.tool_choice,
        parallel_tool_calls=request.parallel_tool_calls,
        text=request.text,
        reasoning=request.upstream_reasoning(),
        truncation=request.truncation,
        salt_epoch=caller.salt_epoch,
        reasoning_context=request.reasoning_context,
    )
    parent_fingerprint = continued.fingerprint
    changes = fingerprint.diff(parent_fingerprint) if parent_fingerprint else []
    created_at = reservation.created_at if reservation else int(time.time())
    tags = services.session_tags
    fields = upstream_fields(
        request, cache_salt=caller.cache_salt, session_id=lineage.session_id, tags=tags
    )
    add_agentic_context(fields, lineage, request, agentic_context_of(services.settings))
    if request.prewarms:
        for_prewarm(fields)
    prompt = sent_items([*history, *new_input], request.reasoning_context)
    if compact_threshold(request) is not None:
        prompt = compacted_window(prompt)
    with tracing.span("render"):
        body = (
            summary_body(fields, prompt, request.max_output_tokens)
            if compacts
            else render_body(fields, prompt)
        )
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
            request,
            response_id=response_id,
            created_at=created_at,
            conversation_id=request.conversation_id,
        ),
        body=body,
        headers=upstream_headers(lineage),
        conversation=continued.conversation,
        history_digest=continued.history_digest,
        reservation=reservation,
        mcp_servers=mcp_servers,
        approvals=approvals,
        compacts=compacts,
        tags=tags,
    )


def fingerprinted_tools(request: CreateResponseRequest) -> list[dict[str, Any]] | None:
    """The tools the turn's model is shown before the history, as far as the request
    decides them: a multi-agent turn's every agent also sees the six actions
    (``wire/multi_agent_tools.py``). Without them in the fingerprint, a plain continuation
    of a tree's response (or a tree continuing a plain one) would lose its cache in the
    tools block with no fingerprint change to explain it."""
    if not request.runs_agents:
        return request.tools
    return [*(request.tools or ()), *ACTION_TOOLS]


def _without_secrets(
    request: CreateResponseRequest,
) -> tuple[CreateResponseRequest, list[McpServer]]:
    """The request's MCP servers (secrets included) and the request without the secrets,
    which is what is echoed, stored and fingerprinted from here on."""
    mcp_servers = parse_servers(request.tools)
    if not mcp_servers:
        return request, mcp_servers
    if request.background and has_secrets(request.tools):
        raise InvalidRequest(
            "MCP 'headers' and 'authorization' are never stored, and a background "
            "response runs from its stored request; run it in the foreground.",
            param="background",
            code="mcp_secrets_in_background",
        )
    return request.model_copy(update={"tools": redact_tools(request.tools)}), mcp_servers


@dataclass(frozen=True)
class _Continued:
    """What the turn continues: its history and, when there is one, its parent."""

    history: list[Item] = field(default_factory=list)
    # The stored turn continued (previous response, or a conversation's head).
    parent: Response | None = None
    conversation: ConversationState | None = None
    link: ParentLineage | None = None
    fingerprint: ExecutionFingerprint | None = None
    history_digest: str | None = None


async def _continued(
    services: Runtime,
    caller: Caller,
    request: CreateResponseRequest,
    new_input: list[Item],
    local: ConnectionHistories | None,
) -> _Continued:
    """The conversation's items and head, a connection's own checkpoint, or the previous
    response's verified history; nothing for a chain's first turn."""
    db = services.db
    if request.conversation_id is not None:
        context = await load_conversation(db, caller.tenant_id, request.conversation_id)
        if request.store:
            taken = {item.id for item in context.history}
            check_unique_ids(new_input, param="input", taken=taken)
        return _from_parent(context.history, context.head, conversation=context.state)
    if request.previous_response_id is None:
        return _Continued()
    checkpoint = local.get(request.previous_response_id) if local else None
    if checkpoint is not None:
        if request.store and not checkpoint.stored:
            raise InvalidRequest(
                f"Response '{checkpoint.response_id}' was not stored, so a stored response "
                "cannot continue it; send store: false or resend the history.",
                param="store",
                code="previous_response_not_stored",
            )
        return _Continued(
            history=list(checkpoint.items),
            link=ParentLineage(checkpoint.response_id, checkpoint.session_id, checkpoint.depth),
            fingerprint=checkpoint.fingerprint,
        )
    parent = await db.turns.checkpoint(caller.tenant_id, request.previous_response_id)
    if parent is None or not parent.store:
        raise previous_response_not_found(request.previous_response_id)
    if parent.status not in CONTINUABLE:
        raise previous_response_not_continuable(parent.id, parent.status)
    history = await _parent_history(db, parent, services.histories)
    return _from_parent(history, parent, history_digest=parent.prefix_digest)


def _from_parent(
    history: list[Item],
    parent: Response | None,
    *,
    conversation: ConversationState | None = None,
    history_digest: str | None = None,
) -> _Continued:
    if parent is None:
        return _Continued(history=history, conversation=conversation)
    return _Continued(
        history=history,
        parent=parent,
        conversation=conversation,
        link=ParentLineage(parent.id, parent.session_id, parent.depth),
        fingerprint=ExecutionFingerprint.from_dict(parent.fingerprint),
        history_digest=history_digest,
    )


async def _parent_history(
    db: Database, parent: Response, histories: VerifiedHistories
) -> list[Item]:
    """The parent's verified history: kept in this process, read after a kept ancestor
    and verified, or read and verified whole. (A continuable parent's row and items never
    change, so reading them in two transactions sees one state.)"""
    kept = histories.get(
        parent.id,
        digest=parent.prefix_digest,
        item_count=parent.history_item_count,
        session_id=parent.session_id,
    )
    if kept is not None:
        return list(kept)
    ancestor = histories.ancestor_for(
        parent.previous_response_id, parent.session_id, below=parent.history_item_count
    )
    async with db.turn_read() as session:
        repo = ResponseRepository(session)
        if ancestor is None:
            history = await load_history(repo, parent)
        else:
            history, extended = await load_history_since(repo, parent, ancestor)
            if extended:
                histories.extended()
    histories.keep(
        parent.id, digest=parent.prefix_digest, session_id=parent.session_id, items=history
    )
    return history


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
