"""Wire shapes of the admin inspection API, and how stored turns are explained in them.

The cache-break explanation lives here, beside the shape it fills, because it is pure
presentation of stored facts: the fingerprint changes the turn pipeline recorded, plus
a history check over the stored item counts (see ``history_edited``). It reads turns
through the ``TurnFacts`` protocol so this bottom layer never imports storage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field

from lineage import ExecutionFingerprint

T = TypeVar("T")

DEFAULT_LIST_LIMIT = 20
# A lineage view lists at most this many descendants; beyond it, ``truncated`` is set.
MAX_DESCENDANTS = 1000


# -- generic shapes ---------------------------------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """Every failure, OpenAI-style."""

    error: ErrorDetail


class ListPage(BaseModel, Generic[T]):
    """OpenAI's cursor list: pass ``last_id`` as ``after`` for the next page."""

    object: Literal["list"] = "list"
    data: list[T]
    first_id: str | None
    last_id: str | None
    has_more: bool


def page_of(rows: Sequence[T], limit: int) -> tuple[list[T], bool]:
    """Repositories fetch ``limit + 1`` rows: the extra one only says there is more."""
    return list(rows[:limit]), len(rows) > limit


def list_page(items: list[T], has_more: bool, id_of: Callable[[T], str]) -> ListPage[T]:
    return ListPage[T](
        data=items,
        first_id=id_of(items[0]) if items else None,
        last_id=id_of(items[-1]) if items else None,
        has_more=has_more,
    )


def unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def hit_ratio(input_tokens: int | None, cached_tokens: int | None) -> float | None:
    """Cached share of the prompt; None when there was no prompt to reuse."""
    if not input_tokens:
        return None
    return (cached_tokens or 0) / input_tokens


# -- tenants and keys -------------------------------------------------------------------


class CreateTenantRequest(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="Unique tenant name.")
    key_name: str | None = Field(
        default=None, max_length=200, description="Label for the tenant's first API key."
    )


class CreateApiKeyRequest(BaseModel):
    name: str | None = Field(default=None, max_length=200, description="Label for the key.")


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
    total: CacheStats


class Deletion(BaseModel):
    object: Literal["admin.deletion"] = "admin.deletion"
    tenant_id: str
    conversation_id: str | None
    deleted: dict[str, int] = Field(description="Rows deleted, per table.")


# -- the cache-break explanation --------------------------------------------------------------


class TurnFacts(Protocol):
    """What a stored turn must expose to be shown (storage's TurnRecord fits)."""

    @property
    def id(self) -> str: ...
    @property
    def previous_response_id(self) -> str | None: ...
    @property
    def fingerprint(self) -> dict[str, Any]: ...
    @property
    def fingerprint_changes(self) -> list[dict[str, Any]]: ...
    @property
    def prefix_digest(self) -> str | None: ...
    @property
    def history_item_count(self) -> int: ...
    @property
    def input_item_count(self) -> int: ...
    @property
    def output_item_count(self) -> int: ...
    @property
    def conversation_position(self) -> int | None: ...


HISTORY_EDITED = "history edited"


def history_edited(turn: TurnFacts, previous: TurnFacts) -> bool | None:
    """Whether ``turn``'s history is not an extension of ``previous``'s; None if unknown.

    The rule, over stored counts only (the items themselves may since have been deleted):
    a continuable turn records ``history_item_count`` = items it saw before its input +
    its input + its output. Extending ``previous`` means it saw exactly what ``previous``
    saw, plus whatever was appended in between. Conversation positions are never reused,
    so "appended in between" is the gap between the end of ``previous``'s items and the
    start of ``turn``'s. Any other count means items were removed (or inserted): edited.
    Without positions (a ``previous_response_id`` chain) the gap is 0; if only one side
    has one, we can only say items went missing when fewer were seen than before.
    Failed turns record no history (no prefix digest), so nothing can be said about them.
    """
    if turn.prefix_digest is None or previous.prefix_digest is None:
        return None
    seen_before_input = turn.history_item_count - turn.input_item_count - turn.output_item_count
    if turn.conversation_position is not None and previous.conversation_position is not None:
        previous_end = (
            previous.conversation_position + previous.input_item_count + previous.output_item_count
        )
        appended = turn.conversation_position - previous_end
        return seen_before_input != previous.history_item_count + appended
    if turn.conversation_position is None and previous.conversation_position is None:
        return seen_before_input != previous.history_item_count
    return seen_before_input < previous.history_item_count


def fingerprint_changes(turn: TurnFacts, previous: TurnFacts) -> list[CacheChange]:
    """The stored changes when ``previous`` is the turn's recorded parent (they were
    computed against it at commit); otherwise (a conversation's previous turn) the same
    diff, recomputed from both stored fingerprints."""
    if turn.previous_response_id == previous.id:
        return [CacheChange(**change) for change in turn.fingerprint_changes]
    try:
        now = ExecutionFingerprint.from_dict(turn.fingerprint)
        before = ExecutionFingerprint.from_dict(previous.fingerprint)
    except ValueError:
        return [CacheChange(**change) for change in turn.fingerprint_changes]
    return [CacheChange(component=c.component, description=c.description) for c in now.diff(before)]


def explain(turn: TurnFacts, previous: TurnFacts | None) -> CacheBreak:
    if previous is None:
        return CacheBreak(
            compared_to=None,
            broken=False,
            changes=[],
            explanation="First turn: there was no earlier prefix to reuse.",
        )
    changes = fingerprint_changes(turn, previous)
    if history_edited(turn, previous):
        changes.append(
            CacheChange(
                component="history",
                description=f"{HISTORY_EDITED}: items the previous turn saw are gone or moved",
            )
        )
    if not changes:
        return CacheBreak(
            compared_to=previous.id,
            broken=False,
            changes=[],
            explanation=(
                "No cache break: same execution config, and the history extends the previous "
                "turn's, so its prefix could be reused."
            ),
        )
    reasons = _join([change.description for change in changes])
    return CacheBreak(
        compared_to=previous.id,
        broken=True,
        changes=changes,
        explanation=f"Cache reuse was not possible because {reasons}.",
    )


def _join(parts: Sequence[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


class TurnView(TurnFacts, Protocol):
    @property
    def session_id(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def deleted_at(self) -> datetime | None: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def fingerprint_digest(self) -> str: ...
    @property
    def conversation_id(self) -> str | None: ...


def present_turn(turn: TurnView, previous: TurnView | None) -> AdminTurn:
    return AdminTurn(
        id=turn.id,
        created_at=int(turn.created_at.timestamp()),
        status=turn.status,
        model=turn.model,
        deleted=turn.deleted_at is not None,
        usage=TurnUsage(
            input_tokens=turn.input_tokens,
            cached_tokens=turn.cached_tokens,
            output_tokens=turn.output_tokens,
            hit_ratio=hit_ratio(turn.input_tokens, turn.cached_tokens),
        ),
        lineage=TurnLineage(
            session_id=turn.session_id,
            continuation_id=turn.id,
            parent=turn.previous_response_id,
            depth=turn.depth,
            conversation_id=turn.conversation_id,
        ),
        fingerprint=TurnFingerprint(digest=turn.fingerprint_digest, components=turn.fingerprint),
        cache_break=explain(turn, previous),
    )


def present_timeline(turns: Sequence[TurnView], before: TurnView | None) -> list[AdminTurn]:
    """A conversation's turns in order, each compared to the latest earlier turn that left
    a history (``before`` is that turn for the first one, from an earlier page).

    "In order" is id order, the order the turns started. A conversation's committed turns
    are serialised by its version check, and a turn mints its id just before it reads
    the conversation, so start order is commit order.
    """
    shown: list[AdminTurn] = []
    previous = before
    for turn in turns:
        shown.append(present_turn(turn, previous))
        if turn.prefix_digest is not None:
            previous = turn
    return shown


def present_chain(turns: Sequence[TurnView]) -> list[AdminTurn]:
    """A ``previous_response_id`` chain, root first: each turn compared to its parent."""
    return [present_turn(turn, turns[i - 1] if i else None) for i, turn in enumerate(turns)]


def present_tree(root: TurnView, descendants: Sequence[TurnView]) -> list[LineageNode]:
    """The descendants of ``root`` as a tree (breadth-first input, so parents come first)."""
    by_id: dict[str, TurnView] = {root.id: root}
    nodes: dict[str, LineageNode] = {}
    top: list[LineageNode] = []
    for turn in descendants:
        parent_id = turn.previous_response_id or ""
        node = LineageNode(**present_turn(turn, by_id.get(parent_id)).model_dump(), children=[])
        by_id[turn.id] = turn
        nodes[turn.id] = node
        if parent_id == root.id:
            top.append(node)
        elif parent_id in nodes:
            nodes[parent_id].children.append(node)
    return top


def metadata_filters(params: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``metadata[key]=value`` query parameters (OpenAPI deepObject style), in order."""
    prefix = "metadata["
    return [
        (name[len(prefix) : -1], value)
        for name, value in params
        if name.startswith(prefix) and name.endswith("]")
    ]
