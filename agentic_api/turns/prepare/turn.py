"""Everything a turn needs before the model is called: lineage, verified history,
fingerprint and the exact upstream request."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentic_api.cache.residency.tags import SessionTags
from agentic_api.errors import InvalidRequest
from agentic_api.mcp.specs import McpServer, has_secrets, parse_servers, redact_tools
from agentic_api.storage.database import Database
from agentic_api.storage.models import Response
from agentic_api.storage.responses import ResponseRepository
from agentic_api.storage.verified_histories import VerifiedHistories
from agentic_api.turns.data.commit_steps import CommitStep, EventLog
from agentic_api.turns.data.token_plan import TokenPlan
from agentic_api.turns.prepare.approvals import PendingApproval, resolve_approvals
from agentic_api.turns.prepare.connection_histories import ConnectionHistories
from agentic_api.turns.prepare.conversation import ConversationState, load_conversation
from agentic_api.turns.prepare.errors import (
    previous_response_not_continuable,
    previous_response_not_found,
)
from agentic_api.turns.prepare.history import load_history
from agentic_api.turns.prepare.render import (
    AgenticContext,
    add_agentic_context,
    render_body,
    upstream_fields,
    upstream_headers,
)
from agentic_api.turns.prepare.summary_request import requests_compaction, summary_body
from agentic_api.wire.conversations import check_unique_ids
from agentic_api.wire.items import Item, normalize_input, to_item
from agentic_api.wire.requests import CreateResponseRequest
from agentic_api.wire.response_object import base_response
from agentic_api.wire.status import CONTINUABLE_STATUSES
from lineage import (
    CONTENT_SESSION_ITEMS,
    ExecutionFingerprint,
    FingerprintChange,
    IdKind,
    ParentLineage,
    ResponseLineage,
    mint_id,
    resolve_lineage,
)

CONTINUABLE = CONTINUABLE_STATUSES


@dataclass(frozen=True)
class Caller:
    """The authenticated tenant, as the turn pipeline needs it."""

    tenant_id: str
    salt_epoch: int
    cache_salt: str = field(repr=False)


@dataclass(frozen=True)
class Reservation:
    """A turn whose identity was fixed earlier: a background job, enqueued (response id,
    creation time, input items with their ids and bytes) by the request that made it and
    prepared again when a worker runs it. Its row exists; the commit completes it."""

    response_id: str
    created_at: int
    new_input: list[Item]


@dataclass
class PreparedTurn:
    caller: Caller
    request: CreateResponseRequest
    response_id: str
    created_at: int
    lineage: ResponseLineage
    # The turn this one continues: the previous response, or in a conversation its head.
    parent: Response | None
    history: list[Item]
    new_input: list[Item]
    fingerprint: ExecutionFingerprint
    fingerprint_changes: list[FingerprintChange]
    base: dict[str, Any]
    body: bytes
    headers: dict[str, str]
    conversation: ConversationState | None = None
    # The verified digest of ``history`` under the parent's model and salt epoch, when the
    # history is exactly the parent's: the commit extends it instead of rehashing it all.
    history_digest: str | None = None
    reservation: Reservation | None = None
    # Set by whoever runs the turn: work that commits with it, and where its events
    # are already being stored (see turns/commit_steps.py).
    commit_steps: list[CommitStep] = field(default_factory=list)
    event_log: EventLog | None = None
    # The request's MCP servers, with their secrets (which ``request`` no longer holds).
    mcp_servers: list[McpServer] = field(default_factory=list, repr=False)
    # Answers in the input to approval requests of earlier turns.
    approvals: list[PendingApproval] = field(default_factory=list)
    # Set when the turn completes: its output as the model saw it (what is stored and
    # replayed), which for a turn that ran tools differs from the client's ``output``.
    model_output: list[Item] | None = None
    # The input ends with a ``compaction_trigger``: the model summarizes the history and
    # the turn's output is one ``compaction`` item (turns/compaction.py).
    compacts: bool = False
    # How its upstream requests name the session for the replicas' KV events.
    tags: SessionTags = field(default_factory=SessionTags)
    # Set by the runner when the upstream reports token ids (turns/tokens.py).
    tokens: TokenPlan | None = None

    @property
    def runs_tools(self) -> bool:
        """Whether the gateway runs tools in this turn (so it may take several rounds)."""
        return bool(self.mcp_servers or self.approvals)

    @property
    def records_events(self) -> bool:
        """Whether the turn's event stream is stored (to be replayed or followed)."""
        return self.request.store and (self.request.stream or self.request.background)

    @property
    def prompt_items(self) -> list[Item]:
        return [*self.history, *self.new_input]

    @property
    def conversation_id(self) -> str | None:
        return None if self.conversation is None else self.conversation.id


async def prepare_turn(
    db: Database,
    caller: Caller,
    request: CreateResponseRequest,
    *,
    histories: VerifiedHistories,
    local: ConnectionHistories | None = None,
    reservation: Reservation | None = None,
    tags: SessionTags | None = None,
    agentic_context: AgenticContext | None = None,
) -> PreparedTurn:
    """``histories``: this process's verified histories, consulted before the items in
    storage. ``local``: a WebSocket connection's own histories, consulted before both.
    ``reservation``: the id, creation time and input a background job was enqueued with.
    ``agentic_context``: the router's program-scheduling hints to send, when configured."""
    mcp_servers = parse_servers(request.tools)
    if mcp_servers:
        if request.background and has_secrets(request.tools):
            raise InvalidRequest(
                "MCP 'headers' and 'authorization' are never stored, and a background "
                "response runs from its stored request; run it in the foreground.",
                param="background",
                code="mcp_secrets_in_background",
            )
        # From here on the request (echoed, stored, fingerprinted) holds no secret.
        request = request.model_copy(update={"tools": redact_tools(request.tools)})
    if reservation is not None:
        response_id, new_input = reservation.response_id, list(reservation.new_input)
    else:
        response_id = mint_id(IdKind.RESPONSE)
        new_input = [to_item(v) for v in normalize_input(request.input, assign_ids=request.store)]
    parent: Response | None = None
    history: list[Item] = []
    conversation: ConversationState | None = None
    parent_link: ParentLineage | None = None
    history_digest: str | None = None
    parent_fingerprint: ExecutionFingerprint | None = None
    if request.conversation_id is not None:
        context = await load_conversation(db, caller.tenant_id, request.conversation_id)
        conversation, history, parent = context.state, context.history, context.head
        if request.store:
            taken = {item.id for item in history}
            check_unique_ids(new_input, param="input", taken=taken)
    elif request.previous_response_id is not None and (
        checkpoint := local.get(request.previous_response_id) if local else None
    ):
        if request.store and not checkpoint.stored:
            raise InvalidRequest(
                f"Response '{checkpoint.response_id}' was not stored, so a stored response "
                "cannot continue it; send store: false or resend the history.",
                param="store",
                code="previous_response_not_stored",
            )
        history = list(checkpoint.items)
        parent_link = ParentLineage(checkpoint.response_id, checkpoint.session_id, checkpoint.depth)
        parent_fingerprint = checkpoint.fingerprint
    elif request.previous_response_id is not None:
        parent = await db.turns.checkpoint(caller.tenant_id, request.previous_response_id)
        if parent is None or not parent.store:
            raise previous_response_not_found(request.previous_response_id)
        if parent.status not in CONTINUABLE:
            raise previous_response_not_continuable(parent.id, parent.status)
        history = await _parent_history(db, parent, histories)
        history_digest = parent.prefix_digest
    if parent is not None:
        parent_link = ParentLineage(parent.id, parent.session_id, parent.depth)
        parent_fingerprint = ExecutionFingerprint.from_dict(parent.fingerprint)
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

    lineage = resolve_lineage(
        tenant_id=caller.tenant_id,
        response_id=response_id,
        conversation_id=request.conversation_id,
        parent=parent_link,
        prompt_cache_key=request.prompt_cache_key,
        first_items=[item.data for item in (history or new_input)[:CONTENT_SESSION_ITEMS]],
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
    changes = fingerprint.diff(parent_fingerprint) if parent_fingerprint else []
    created_at = reservation.created_at if reservation else int(time.time())
    tags = tags or SessionTags()
    fields = upstream_fields(
        request, cache_salt=caller.cache_salt, session_id=lineage.session_id, tags=tags
    )
    add_agentic_context(fields, lineage, request, agentic_context)
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
            request,
            response_id=response_id,
            created_at=created_at,
            conversation_id=request.conversation_id,
        ),
        body=(
            summary_body(fields, prompt, request.max_output_tokens)
            if compacts
            else render_body(fields, prompt)
        ),
        headers=upstream_headers(lineage),
        conversation=conversation,
        history_digest=history_digest,
        reservation=reservation,
        mcp_servers=mcp_servers,
        approvals=approvals,
        compacts=compacts,
        tags=tags,
    )


async def _parent_history(
    db: Database, parent: Response, histories: VerifiedHistories
) -> list[Item]:
    """The parent's verified history: kept in this process, or read and verified. (A
    continuable parent's row and items never change, so reading them in two transactions
    sees one state.)"""
    kept = histories.get(
        parent.id,
        digest=parent.prefix_digest,
        item_count=parent.history_item_count,
        session_id=parent.session_id,
    )
    if kept is not None:
        return list(kept)
    async with db.turn_read() as session:
        history = await load_history(ResponseRepository(session), parent)
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
