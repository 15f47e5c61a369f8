"""Wire shapes of the admin inspection API (the timeline explanations that fill some of
them are built in ``operator/handlers/admin/timeline.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator

from agentic_api.operator.shapes.keep_warm import AdminRewarm
from agentic_api.operator.shapes.placement import AdminPlacement
from agentic_api.operator.shapes.residency import TurnResidency
from agentic_api.operator.shapes.token_account import TokenAccountView
from agentic_api.wire.storable import NUL

T = TypeVar("T")

DEFAULT_LIST_LIMIT = 20
# A lineage view lists at most this many descendants; beyond it, ``truncated`` is set.
MAX_DESCENDANTS = 1000
# Whose turns usage statistics count: Responses turns, recorded Messages turns, or both.
UsageApi = Literal["all", "responses", "messages"]


# -- generic shapes ---------------------------------------------------------------------


class ListPage(BaseModel, Generic[T]):
    """OpenAI's cursor list: pass ``last_id`` as ``after`` for the next page."""

    object: Literal["list"] = "list"
    data: list[T]
    first_id: str | None
    last_id: str | None
    has_more: bool


def hit_ratio(input_tokens: int | None, cached_tokens: int | None) -> float | None:
    """Cached share of the prompt; None when there was no prompt to reuse."""
    if not input_tokens:
        return None
    return (cached_tokens or 0) / input_tokens


# -- tenants and keys -------------------------------------------------------------------


def _storable_name(value: str | None) -> str | None:
    # Names are plain string columns, which cannot hold NUL on PostgreSQL.
    if value is not None and NUL in value:
        raise ValueError("must not contain the NUL character (U+0000)")
    return value


class CreateTenantRequest(BaseModel):
    name: str = Field(min_length=1, max_length=200, strict=True, description="Unique tenant name.")
    key_name: str | None = Field(
        default=None,
        max_length=200,
        strict=True,
        description="Label for the tenant's first API key.",
    )

    _names = field_validator("name", "key_name")(_storable_name)


class CreateApiKeyRequest(BaseModel):
    name: str | None = Field(
        default=None, max_length=200, strict=True, description="Label for the key."
    )

    _names = field_validator("name")(_storable_name)


class AdminTenant(BaseModel):
    object: Literal["admin.tenant"] = "admin.tenant"
    id: str
    name: str
    status: Literal["active", "disabled"]
    created_at: int
    disabled_at: int | None
    salt_epoch: int = Field(description="Bumped by rotate_salt; part of the tenant cache salt.")


class AdminApiKey(BaseModel):
    object: Literal["admin.api_key"] = "admin.api_key"
    id: str
    tenant_id: str
    name: str | None
    display_prefix: str = Field(description="The key's first characters, to recognise it by.")
    status: Literal["active", "revoked"]
    created_at: int
    revoked_at: int | None


class IssuedApiKey(AdminApiKey):
    key: str = Field(description="The secret key. Shown only in this response, never again.")


class TenantCreated(BaseModel):
    object: Literal["admin.tenant.created"] = "admin.tenant.created"
    tenant: AdminTenant
    api_key: IssuedApiKey


# -- conversations ------------------------------------------------------------------------


class AdminConversation(BaseModel):
    object: Literal["admin.conversation"] = "admin.conversation"
    id: str
    tenant_id: str
    created_at: int
    updated_at: int
    metadata: dict[str, Any]
    head_response_id: str | None
    turn_count: int


# -- turns, timelines and lineage -------------------------------------------------------------


class TurnUsage(BaseModel):
    input_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    hit_ratio: float | None = Field(description="cached_tokens / input_tokens; null when 0.")


class TurnLineage(BaseModel):
    session_id: str
    continuation_id: str = Field(description="This turn's response id.")
    parent: str | None = Field(description="previous_response_id, when the turn had one.")
    depth: int
    conversation_id: str | None


class TurnFingerprint(BaseModel):
    digest: str
    components: dict[str, Any] = Field(
        description="Execution config the turn ran under (bulky values as digests)."
    )


class CacheChange(BaseModel):
    component: str = Field(description="model, instructions, tools, …, salt_epoch or history.")
    description: str


class CacheBreak(BaseModel):
    compared_to: str | None = Field(
        description="The earlier turn whose prefix this one could reuse; null for a first turn."
    )
    broken: bool
    changes: list[CacheChange]
    explanation: str


class AdminTurn(BaseModel):
    object: Literal["admin.turn"] = "admin.turn"
    id: str
    created_at: int
    status: str
    model: str
    deleted: bool = Field(description="Deleted by the tenant; kept as part of later history.")
    usage: TurnUsage
    lineage: TurnLineage
    fingerprint: TurnFingerprint
    cache_break: CacheBreak
    residency: TurnResidency | None = Field(
        default=None,
        description="Prefix not resident: a continuation that reused less than expected "
        "although nothing in it changed, and what the replicas' KV events say caused it.",
    )
    tokens: TokenAccountView | None = Field(
        description="Token-level reuse account against the parent's exact tokens: expected, "
        "measured and token-exact reusable tokens and the cause of any loss; null when the "
        "upstream did not report token ids."
    )
    rewarms: list[AdminRewarm] = Field(
        default_factory=list,
        description="Keep-warm re-warms of this turn's continuation while its agent was "
        "paused after it (AGENTIC_KEEP_WARM_ENABLED; kept in the serving process).",
    )
    placements: list[AdminPlacement] = Field(
        default_factory=list,
        description="Where the gateway placed each upstream round of this turn, and of the "
        "prewarms of its continuation (AGENTIC_UPSTREAM_REPLICAS; kept in the serving "
        "process): the replica, the reason and each candidate's resident tokens.",
    )


class TokenArtifactInfo(BaseModel):
    prompt_tokens: int
    output_tokens: int
    stored_bytes: int = Field(description="Both id lists, packed and compressed.")
    encoding: str
    model: str
    tokenizer: str = Field(description="Tokenizer/template identity the upstream exposed.")
    created_at: int


class AdminTokenAccount(BaseModel):
    object: Literal["admin.token_account"] = "admin.token_account"
    response_id: str
    tenant_id: str
    model: str
    account: TokenAccountView | None = Field(description="Null: no token ids were reported.")
    artifact: TokenArtifactInfo | None = Field(
        description="This turn's own stored token ids; null when none (or expired)."
    )


class AgentRoundView(BaseModel):
    round: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int


class FirstRequestReuse(BaseModel):
    """A subagent's first request against its parent's: what it shared and reused."""

    shared_prefix_tokens: int = Field(
        description="Token prefix the subagent's first prompt shares with its parent's round."
    )
    expected_cached: int = Field(description="Every full KV block of that shared prefix.")
    measured_cached: int = Field(description="What the model server reported cached.")
    hit: bool = Field(description="measured_cached >= expected_cached.")


class AgentAccount(BaseModel):
    agent_name: str
    parent_agent: str | None
    response_id: str | None = Field(
        default=None,
        description="The agent's own stored response: the root's is the response itself; "
        "a subagent's is stored with it (GET /v1/responses/{id}, continuable).",
    )
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    first_request: FirstRequestReuse | None = Field(
        description="A subagent's first request's reuse; null for the root, or when the "
        "model server reported no token ids."
    )
    rounds: list[AgentRoundView]


class AdminAgentAccounts(BaseModel):
    """Each agent's token account of a multi-agent response (empty for any other)."""

    object: Literal["admin.agent_accounts"] = "admin.agent_accounts"
    response_id: str
    tenant_id: str
    agents: list[AgentAccount]


class LineageNode(AdminTurn):
    children: list[LineageNode]


class AdminLineage(BaseModel):
    object: Literal["admin.lineage"] = "admin.lineage"
    response_id: str
    tenant_id: str
    ancestors: list[AdminTurn] = Field(
        description="Root first, ending with the response itself; each compared to its parent."
    )
    descendants: list[LineageNode] = Field(
        description="Turns continued from the response; more than one child is a fork."
    )
    descendant_count: int
    truncated: bool = Field(description=f"More than {MAX_DESCENDANTS} descendants; list cut.")


# -- cache statistics and deletions ---------------------------------------------------------


class CacheStats(BaseModel):
    object: Literal["admin.cache_stats"] = "admin.cache_stats"
    model: str | None = Field(description="null on the all-models total.")
    turns: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    hit_ratio: float | None


class CacheStatsPage(ListPage[CacheStats]):
    tenant_id: str
    since: int | None
    until: int | None
    api: UsageApi = Field(
        description="Whose turns are counted: stored Responses turns, recorded Anthropic "
        "Messages turns (AGENTIC_MESSAGES_RECORD_TURNS), or both."
    )
    total: CacheStats


class AdminMessageTurn(BaseModel):
    """A recorded Anthropic Messages API turn: usage and session, never content."""

    object: Literal["admin.message_turn"] = "admin.message_turn"
    id: str
    created_at: int
    session_id: str = Field(description="What went upstream as X-Session-ID.")
    session_source: str = Field(description="client_session, user_id or content.")
    model: str
    stream: bool
    status: str = Field(description="completed, failed or cancelled (the client left).")
    stop_reason: str | None
    message_id: str | None = Field(description="The message id the client saw.")
    message_count: int = Field(description="Messages the client sent (its whole history).")
    input_tokens: int | None = Field(description="The whole prompt, cached tokens included.")
    cached_tokens: int | None = Field(description="Anthropic's cache_read_input_tokens.")
    cache_creation_tokens: int | None
    output_tokens: int | None
    hit_ratio: float | None


class Deletion(BaseModel):
    object: Literal["admin.deletion"] = "admin.deletion"
    tenant_id: str
    conversation_id: str | None
    deleted: dict[str, int] = Field(description="Rows deleted, per table.")


def metadata_filters(params: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``metadata[key]=value`` query parameters (OpenAPI deepObject style), in order."""
    prefix = "metadata["
    return [
        (name[len(prefix) : -1], value)
        for name, value in params
        if name.startswith(prefix) and name.endswith("]")
    ]
