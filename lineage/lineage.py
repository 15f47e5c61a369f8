"""Who a response belongs to: its session, its parent and its depth.

The session id travels upstream as ``X-Session-ID`` so the router can keep
every turn of one session on the replica that holds its KV cache. It must
therefore be the same for every turn of a session, including turns from
clients that keep no server-side state at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from lineage._framing import tagged_sha256

__all__ = [
    "CONTENT_SESSION_ITEMS",
    "ParentLineage",
    "ResponseLineage",
    "SessionSource",
    "resolve_lineage",
    "resolve_stateless_session",
]

# A client that resends its whole, growing history (Codex over HTTP with
# store: false) only keeps its first items fixed, so only those may decide
# the session; two covers a system/developer preamble plus the first prompt.
CONTENT_SESSION_ITEMS = 2

_SESSION_PREFIX = "sess_"
_SESSION_HEX = 32
_PROMPT_CACHE_KEY_TAG = b"agentic-api/session/v1/prompt-cache-key"
_CONTENT_TAG = b"agentic-api/session/v1/content"
_CLIENT_SESSION_TAG = b"agentic-api/session/v1/client-session"
_USER_ID_TAG = b"agentic-api/session/v1/user-id"


class SessionSource(StrEnum):
    CONVERSATION = "conversation"
    PARENT = "parent"
    PROMPT_CACHE_KEY = "prompt_cache_key"
    CONTENT = "content"
    # Stateless APIs (Anthropic Messages): the client's own session id, or its user id.
    CLIENT_SESSION = "client_session"
    USER_ID = "user_id"


@dataclass(frozen=True)
class ParentLineage:
    response_id: str
    session_id: str
    depth: int


@dataclass(frozen=True)
class ResponseLineage:
    session_id: str
    continuation_id: str
    parent_id: str | None
    depth: int
    session_source: SessionSource

    def headers(self) -> dict[str, str]:
        return {"X-Session-ID": self.session_id, "X-Continuation-ID": self.continuation_id}


def resolve_lineage(
    *,
    tenant_id: str,
    response_id: str,
    conversation_id: str | None = None,
    parent: ParentLineage | None = None,
    prompt_cache_key: str | None = None,
    first_items: Sequence[bytes] = (),
) -> ResponseLineage:
    """Place a new response in its session.

    The session comes from the first of: the conversation, the parent
    response, ``prompt_cache_key``, the first model-visible items (given as
    canonical JSON bytes). An empty ``prompt_cache_key`` counts as absent,
    since it would lump all of a tenant's keyless traffic into one session.
    """
    if not tenant_id:
        raise ValueError("tenant id must not be empty")
    if not response_id:
        raise ValueError("response id must not be empty")
    if conversation_id == "":
        raise ValueError("conversation id must not be empty")
    if parent is not None and parent.depth < 0:
        raise ValueError(f"parent depth must not be negative, not {parent.depth}")

    session_id, source = _resolve_session(
        tenant_id, conversation_id, parent, prompt_cache_key, first_items
    )
    return ResponseLineage(
        session_id=session_id,
        continuation_id=response_id,
        parent_id=None if parent is None else parent.response_id,
        depth=0 if parent is None else parent.depth + 1,
        session_source=source,
    )


def _resolve_session(
    tenant_id: str,
    conversation_id: str | None,
    parent: ParentLineage | None,
    prompt_cache_key: str | None,
    first_items: Sequence[bytes],
) -> tuple[str, SessionSource]:
    if conversation_id is not None:
        return conversation_id, SessionSource.CONVERSATION
    if parent is not None:
        return parent.session_id, SessionSource.PARENT
    tenant = tenant_id.encode("utf-8")
    if prompt_cache_key:
        key = prompt_cache_key.encode("utf-8")
        return _derived_session(_PROMPT_CACHE_KEY_TAG, tenant, key), SessionSource.PROMPT_CACHE_KEY
    if first_items:
        head = first_items[:CONTENT_SESSION_ITEMS]
        return _derived_session(_CONTENT_TAG, tenant, *head), SessionSource.CONTENT
    raise ValueError(
        "cannot place a response in a session without a conversation, a parent,"
        " a prompt_cache_key or any input items"
    )


def _derived_session(tag: bytes, tenant: bytes, *material: bytes) -> str:
    # Hashing the tenant in keeps equal keys of two tenants apart, and
    # hashing at all keeps the client's raw key out of upstream headers.
    return _SESSION_PREFIX + tagged_sha256(tag, tenant, *material).hex()[:_SESSION_HEX]


def resolve_stateless_session(
    *,
    tenant_id: str,
    client_session_id: str | None = None,
    user_id: str | None = None,
    first_items: Sequence[bytes] = (),
) -> tuple[str, SessionSource]:
    """The session of a request whose client keeps all state and resends its history
    (the Anthropic Messages API): the client's session id when it sends one (Claude
    Code's ``x-claude-code-session-id``), else its user id (``metadata.user_id``), else
    the first model-visible items, as for a Responses chain's root. Empty values count
    as absent, and every source is hashed with the tenant, so equal client values of two
    tenants never share a session and raw client values never travel upstream.
    """
    if not tenant_id:
        raise ValueError("tenant id must not be empty")
    tenant = tenant_id.encode("utf-8")
    if client_session_id:
        material = client_session_id.encode("utf-8")
        return _derived_session(_CLIENT_SESSION_TAG, tenant, material), SessionSource.CLIENT_SESSION
    if user_id:
        material = user_id.encode("utf-8")
        return _derived_session(_USER_ID_TAG, tenant, material), SessionSource.USER_ID
    if first_items:
        head = first_items[:CONTENT_SESSION_ITEMS]
        return _derived_session(_CONTENT_TAG, tenant, *head), SessionSource.CONTENT
    raise ValueError("cannot place a request in a session without a session id, user or items")
