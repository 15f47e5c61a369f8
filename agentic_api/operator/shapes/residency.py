"""Shapes of the admin residency views: what the replicas' KV events said about a session.

Residency is what the engines *reported* to this server process (stored blocks not yet
reported removed), not a promise that the next request will hit: a block may be evicted
between the report and the request, and a process that started late, or lost events,
shows less than the engines hold (never more).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

RESIDENCY_NOTE = (
    "What the replicas' KV events reported to this server process since it started: "
    "blocks stored under this session and not reported removed. Not a guarantee of a "
    "cache hit; a replica whose events were lost or that restarted shows nothing until "
    "it reports again."
)


class ResidencyEviction(BaseModel):
    at: float = Field(description="Unix seconds when this process received the removals.")
    blocks: int
    tokens: int
    idle_seconds: float | None = Field(
        description="How long the session had been idle (its last turn's end to the "
        "eviction); null when one of its turns was running."
    )
    before_resume: bool = Field(
        description="A later turn of the session started after it (a resume that found "
        "its blocks gone)."
    )


class CoverageReset(BaseModel):
    at: float
    reason: Literal["cleared", "restart", "gap", "malformed", "disconnected"] | str = Field(
        description="cleared: the engine dropped its cache (AllBlocksCleared); restart: its "
        "event numbering started again; gap: events were lost; malformed: an unreadable "
        "batch; disconnected: its publisher went away. Each drops what was known."
    )
    blocks: int = Field(description="Blocks (of every session) forgotten by it.")


class ReplicaResidency(BaseModel):
    replica: str
    connected: bool = Field(description="This process's subscription has a live publisher.")
    resident_blocks: int
    resident_tokens: int
    block_size: int | None = Field(description="Tokens per block, as the replica reported.")
    first_stored_at: float | None
    last_stored_at: float | None
    salt_matches_tenant: bool | None = Field(
        description="Whether the cache salt in the session's first block is the tenant's "
        "current salt; null when no first block was seen."
    )
    evictions: list[ResidencyEviction]
    coverage_since: float | None = Field(
        description="Since when this replica's reports are complete here (first event, or "
        "the last reset)."
    )
    coverage_resets: list[CoverageReset]


class BranchOnReplica(BaseModel):
    replica: str
    connected: bool = Field(description="This process's subscription has a live publisher.")
    block_size: int | None = Field(description="Tokens per block, as the replica reported.")
    resident_tokens: int | None = Field(
        description="Leading tokens of the response's prompt + output that the replica "
        "reported holding (full blocks, whoever stored them: the parent's, a sibling's, "
        "another session's shared prefix), and has not reported removing; blocks stored "
        "before this process listened count once a turn was served them. Null when "
        "unknown: the prefix runs into blocks this process never heard of while the "
        "replica may hold blocks stored before its reports began (see known_tokens)."
    )
    known_tokens: int = Field(
        description="The leading tokens known to be held (resident_tokens when known)."
    )
    reusable_tokens: int | None = Field(
        description="The most a continuation can be served of them: every full block of "
        "the prompt + output but its last token (which has no KV); null without a block "
        "size."
    )
    coverage_since: float | None = Field(
        description="Since when this replica's reports are complete here (first event, or "
        "the last reset)."
    )


class BranchResidency(BaseModel):
    """A response's own leading prefix (its branch), not its session's tally."""

    response_id: str
    available: bool = Field(
        description="False when the response's token ids are not known (token artifacts "
        "off, an upstream that does not report them, or expired): nothing can be matched."
    )
    reason: str | None = Field(description="Why it is not available.")
    tokens: int | None = Field(description="The response's prompt + output tokens.")
    resident_tokens: int | None = Field(
        description="The most any replica holds of them; null when that is unknown (a "
        "replica's figure is unknown and none is known to hold every reusable block)."
    )
    replica: str | None = Field(
        description="The replica known to hold the most (null when none is known to hold any)."
    )
    replicas: list[BranchOnReplica]


class SessionResidency(BaseModel):
    object: Literal["admin.session_residency"] = "admin.session_residency"
    session_id: str
    tenant_id: str
    conversation_id: str | None
    response_id: str | None
    tracking: bool = Field(description="False when this server follows no KV events.")
    resident_tokens: int = Field(description="Sum over replicas.")
    replicas: list[ReplicaResidency]
    branch: BranchResidency | None = Field(
        description="How much of the response's own prompt + output is resident, and where "
        "(a conversation: its latest response); what its next continuation can reuse. "
        "Null for a conversation without a response, or when no KV events are followed."
    )
    note: str = RESIDENCY_NOTE


class TurnResidency(BaseModel):
    """Why a continuation reused less than its history allowed, from the KV events."""

    expected_cached_tokens: int = Field(
        description="What a resident prefix gives: the turn's token account's "
        "expected_cached (full blocks of the parent's prompt + output this prompt repeats); "
        "without an account, every full block of the previous turn's prompt, capped by "
        "what vLLM can reuse of this prompt."
    )
    measured_cached_tokens: int
    cause: Literal["evicted", "replica_reset", "other_replica", "not_seen"]
    replica: str | None
    eviction: ResidencyEviction | None
    explanation: str
