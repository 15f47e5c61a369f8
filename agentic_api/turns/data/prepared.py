"""A prepared turn: everything known before the model is called, fixed from then on.

What is written while the turn runs (its token plan, what the model saw, the events
being stored, the commit's extra steps) is the runner's (``turns/runner/in_progress.py``),
never this object's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentic_api.cache.residency.tags import SessionTags
from agentic_api.mcp.specs import McpServer
from agentic_api.storage.models import Response
from agentic_api.turns.data.caller import Caller, Reservation
from agentic_api.wire.events import CONTINUABLE_STATUSES
from agentic_api.wire.items import Item
from agentic_api.wire.mcp import ApprovalResponse
from agentic_api.wire.reasoning_context import sent_items
from agentic_api.wire.requests import CreateResponseRequest
from lineage import ExecutionFingerprint, FingerprintChange, ResponseLineage

CONTINUABLE = CONTINUABLE_STATUSES


@dataclass(frozen=True)
class ConversationState:
    """The conversation as the turn read it; the commit succeeds only if still current."""

    id: str
    version: int
    next_position: int


@dataclass(frozen=True)
class PendingApproval:
    """A client's answer and the model's call it answers."""

    answer: ApprovalResponse
    call: dict[str, Any]
    param: str

    @property
    def call_id(self) -> str:
        return str(self.call["call_id"])

    @property
    def function_name(self) -> str:
        return str(self.call.get("name", ""))

    @property
    def arguments(self) -> str:
        arguments = self.call.get("arguments")
        return arguments if isinstance(arguments, str) else ""


@dataclass(frozen=True)
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
    # The request's MCP servers, with their secrets (which ``request`` no longer holds).
    mcp_servers: list[McpServer] = field(default_factory=list, repr=False)
    # Answers in the input to approval requests of earlier turns.
    approvals: list[PendingApproval] = field(default_factory=list)
    # The input ends with a ``compaction_trigger``: the model summarizes the history and
    # the turn's output is one ``compaction`` item (turns/kinds/compaction.py).
    compacts: bool = False
    # How its upstream requests name the session for the replicas' KV events.
    tags: SessionTags = field(default_factory=SessionTags)

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
    def sent_prompt_items(self) -> list[Item]:
        """The prompt items the model is sent: under ``reasoning.context: current_turn``,
        without the reasoning of earlier turns (``wire/reasoning_context.py``)."""
        return sent_items(self.prompt_items, self.request.reasoning_context)

    @property
    def conversation_id(self) -> str | None:
        return None if self.conversation is None else self.conversation.id
