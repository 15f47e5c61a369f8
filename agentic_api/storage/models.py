"""Tables. Every row of tenant data carries ``tenant_id`` so every read can be scoped by it.

Items are stored as their canonical JSON text (``data``): exactly the bytes we send
upstream when the item is replayed, which is what makes the prefix digest provable.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agentic_api.storage.types import JsonDocument, QueryableJsonDocument, UtcDateTime, utcnow

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID = String(64)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Bumped to rotate the tenant's cache salt (which throws away its cached prefixes).
    salt_epoch: Mapped[int] = mapped_column(Integer, default=1)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    # sha256 of the key; the key itself is shown once at creation and never stored.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(32))
    name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class AdminKey(Base):
    __tablename__ = "admin_keys"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(32))
    name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class ConsoleLogout(Base):
    """A console session that logged out (its cookie's nonce), kept until that cookie
    would have expired anyway."""

    __tablename__ = "console_logouts"
    __table_args__ = (Index(None, "expires_at"),)

    nonce: Mapped[str] = mapped_column(ID, primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Conversation(Base):
    __tablename__ = "conversations"
    # (updated_at): the retention sweep reads the oldest of all tenants.
    __table_args__ = (Index(None, "tenant_id", "updated_at"), Index(None, "updated_at"))

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", QueryableJsonDocument, default=dict
    )
    # Position the next appended item takes; positions never repeat, so order has no gaps
    # within one append and deletions never reorder what remains.
    next_position: Mapped[int] = mapped_column(Integer, default=0)
    # Optimistic lock: a turn commits only if the version it read is still current.
    version: Mapped[int] = mapped_column(Integer, default=0)
    head_response_id: Mapped[str | None] = mapped_column(ID)
    # The client's end-user identifier for abuse monitoring (openai 3.63's
    # conversations.create), kept for the operator; never echoed (OpenAI does not).
    safety_identifier: Mapped[str | None] = mapped_column(String(128))


class ConversationItem(Base):
    __tablename__ = "conversation_items"
    __table_args__ = (UniqueConstraint("conversation_id", "item_id"),)

    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ID)
    item_id: Mapped[str] = mapped_column(ID)
    type: Mapped[str] = mapped_column(String(64))
    data: Mapped[str] = mapped_column(Text)
    response_id: Mapped[str | None] = mapped_column(ID)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Response(Base):
    __tablename__ = "responses"
    __table_args__ = (
        Index(None, "tenant_id", "created_at"),
        Index(None, "tenant_id", "conversation_id"),
        Index(None, "previous_response_id"),
        Index(None, "tenant_id", "session_id", "id"),
        # The retention sweep reads the oldest of all tenants.
        Index(None, "created_at"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    conversation_id: Mapped[str | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL")
    )
    previous_response_id: Mapped[str | None] = mapped_column(ID)
    session_id: Mapped[str] = mapped_column(String(200))
    depth: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    store: Mapped[bool] = mapped_column(Boolean, default=True)
    background: Mapped[bool] = mapped_column(Boolean, default=False)
    # Deleted responses stay as ancestors of their descendants but are unreachable by id.
    deleted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # The Response object exactly as the client last saw it.
    body: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    # The create request after validation (what a background worker needs to run it).
    request: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    error: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument)
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    fingerprint_digest: Mapped[str] = mapped_column(String(64))
    # What changed in the fingerprint relative to the parent turn (why reuse may have died).
    fingerprint_changes: Mapped[list[dict[str, Any]]] = mapped_column(JsonDocument, default=list)
    salt_epoch: Mapped[int] = mapped_column(Integer)
    # Hash chain over the full model-visible history through this turn's output, and
    # how many items it covers: rehydration recomputes both and fails closed on mismatch.
    prefix_digest: Mapped[str | None] = mapped_column(String(64))
    history_item_count: Mapped[int] = mapped_column(Integer, default=0)
    input_item_count: Mapped[int] = mapped_column(Integer, default=0)
    output_item_count: Mapped[int] = mapped_column(Integer, default=0)
    # For a turn in a conversation: the conversation position of its first input item.
    conversation_position: Mapped[int | None] = mapped_column(Integer)
    # The turn's reuse account against its parent's exact tokens (cache/accounting.py),
    # when the upstream reported token ids; kept after the ids themselves expire.
    token_account: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument)
    # The account's lost tokens, in total and by cause, in columns of their own: the
    # console sums and sorts on them, and an account's other strings (decoded divergence
    # pieces) may hold a NUL that PostgreSQL cannot turn into text while reading the JSON.
    lost_tokens: Mapped[int | None] = mapped_column(BigInteger)
    lost_by_cause: Mapped[dict[str, int] | None] = mapped_column(QueryableJsonDocument)
    # A subagent of a multi-agent response (the hosted multi-agent beta) is stored as a
    # response of its own, in the same commit as the response whose tree spawned it:
    # that response's id and the agent's name. NULL for every other response.
    spawned_by: Mapped[str | None] = mapped_column(ID, index=True)
    agent_name: Mapped[str | None] = mapped_column(String(400))


class ResponseItem(Base):
    __tablename__ = "response_items"
    __table_args__ = (Index(None, "tenant_id", "item_id"),)

    response_id: Mapped[str] = mapped_column(
        ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ID)
    item_id: Mapped[str] = mapped_column(ID)
    # "input" items were sent by the client for this turn; "output" items came from the model.
    role: Mapped[str] = mapped_column(String(8))
    type: Mapped[str] = mapped_column(String(64))
    data: Mapped[str] = mapped_column(Text)


class ResponseEvent(Base):
    __tablename__ = "response_events"

    response_id: Mapped[str] = mapped_column(
        ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    sequence_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    # A row holds a run of consecutive events, sequence_number..last_sequence_number, their
    # JSON joined by newlines (storage/turn_rows.py): a streamed turn's hundreds of events
    # are one row. NULL: one event (rows stored before runs existed).
    last_sequence_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    data: Mapped[str] = mapped_column(Text)


class AgentRoundRow(Base):
    """One model round of one agent of a multi-agent response (the hosted multi-agent
    beta): the agent's token account, round by round. A subagent's first round also
    holds what it should have found cached: every full block of the token prefix it
    shares with its parent's round that spawned it (when the upstream reported ids).
    Written in the response's own commit; deleted with it."""

    __tablename__ = "agent_rounds"

    response_id: Mapped[str] = mapped_column(
        ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    agent_name: Mapped[str] = mapped_column(String(400), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ID)
    parent_agent: Mapped[str | None] = mapped_column(String(400))
    input_tokens: Mapped[int] = mapped_column(Integer)
    cached_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    shared_prefix_tokens: Mapped[int | None] = mapped_column(Integer)
    expected_cached: Mapped[int | None] = mapped_column(Integer)


class TokenArtifactRow(Base):
    """A stored turn's exact token ids: the prompt the engine prefilled and the output it
    generated (in the turn's last upstream round: what a continuation extends), packed
    as ``encoding`` says (cache/codec.py). Bound to what made them (model, tokenizer
    identity, fingerprint, salt epoch); deleted with the response, pruned after the
    retention period (``created_at``)."""

    __tablename__ = "token_artifacts"
    __table_args__ = (Index(None, "created_at"),)

    response_id: Mapped[str] = mapped_column(
        ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(ID)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    model: Mapped[str] = mapped_column(String(200))
    tokenizer: Mapped[str] = mapped_column(String(200))
    fingerprint_digest: Mapped[str] = mapped_column(String(64))
    salt_epoch: Mapped[int] = mapped_column(Integer)
    encoding: Mapped[str] = mapped_column(String(32))
    prompt_count: Mapped[int] = mapped_column(Integer)
    output_count: Mapped[int] = mapped_column(Integer)
    prompt_ids: Mapped[bytes] = mapped_column(LargeBinary)
    output_ids: Mapped[bytes] = mapped_column(LargeBinary)
    output_types: Mapped[list[str]] = mapped_column(JsonDocument, default=list)


class BackgroundJob(Base):
    """A ``background: true`` response waiting for, or held by, a worker.

    The row exists from enqueue until the response's terminal write, which deletes it in
    the same transaction; so "there is a job row" means "the response is not finished".
    ``claim_token`` fences every write a worker makes: once the job is cancelled or
    recovered, the token no longer matches and the worker's late writes change nothing.
    """

    __tablename__ = "background_jobs"
    __table_args__ = (
        Index(None, "status", "enqueued_at"),
        Index(None, "status", "lease_expires_at"),
        Index(None, "status", "window_rank", "enqueued_at"),
        Index(None, "tenant_id", "continuation_id"),
    )

    response_id: Mapped[str] = mapped_column(
        ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(ID)
    # "queued" (no worker) or "running" (claimed; started_at says whether it reached the model).
    status: Mapped[str] = mapped_column(String(16))
    enqueued_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Claims so far; a job that keeps losing its worker before starting is given up on.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claim_token: Mapped[str | None] = mapped_column(String(64))
    worker_id: Mapped[str | None] = mapped_column(String(200))
    claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Set just before the upstream request: from here on the model may have done work.
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # ``background_options``: the completion window's rank (0 soonest, 1 2h, 2 8h; lower
    # runs first) and the client's continuation id (a tenant's jobs with one id run one at
    # a time, in the order they were queued).
    window_rank: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    continuation_id: Mapped[str | None] = mapped_column(ID)


class IdempotencyKey(Base):
    """One ``Idempotency-Key`` of one tenant on one endpoint, and what it produced.

    ``in_progress`` rows are claims held by a live request (``owner_token``, renewed
    until ``lease_expires_at``); ``completed`` rows hold the outcome to replay. Rows are
    ignored, and pruned, after ``expires_at``.
    """

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index(None, "expires_at"),)

    tenant_id: Mapped[str] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    endpoint: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    # SHA-256 of the canonical JSON of what the request asked for.
    request_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    owner_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # The outcome: "json" (status_code + body) or "stream" (the response's event stream).
    result_kind: Mapped[str | None] = mapped_column(String(16))
    response_id: Mapped[str | None] = mapped_column(ID)
    status_code: Mapped[int | None] = mapped_column(Integer)
    body: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument)


class MessageTurn(Base):
    """One Anthropic Messages API turn, recorded only with AGENTIC_MESSAGES_RECORD_TURNS:
    what the admin views and cache statistics need, never the messages themselves (the
    client owns its history; we keep no copy it could not see or delete)."""

    __tablename__ = "message_turns"
    __table_args__ = (
        Index(None, "tenant_id", "created_at"),
        Index(None, "tenant_id", "session_id", "id"),
        Index(None, "created_at"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(String(200))
    # Where the session came from: client_session, user_id or content.
    session_source: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(200))
    stream: Mapped[bool] = mapped_column(Boolean, default=False)
    # completed, failed (the upstream broke off or sent an error), cancelled (client left).
    status: Mapped[str] = mapped_column(String(16))
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    # The upstream's message id (msg_…), as the client saw it.
    message_id: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    # The whole prompt (Anthropic's input + cache read + cache creation tokens) and the
    # part of it the upstream's prefix cache served; None when no usage was reported.
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    cache_creation_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
