"""/admin/v1: the operator's inspection API (admin keys only; tenant keys get 401).

Read-only except for the tenant lifecycle (create, disable, rotate salt, keys) and two
explicit destructive actions (delete a conversation, purge a tenant's data).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.security import HTTPBearer

from agentic_api.errors import Conflict, InvalidRequest, NotFound
from agentic_api.http.auth import require_admin, services_of
from agentic_api.http.residency_view import annotate_timeline
from agentic_api.serving.tenants import KeyCache
from agentic_api.storage.admin import (
    AdminRepository,
    ConversationFilter,
    ConversationRecord,
    DuplicateTenantName,
    UsageApi,
    UsageTotals,
    Window,
)
from agentic_api.storage.message_turns import MessageTurnRepository
from agentic_api.storage.models import ApiKey, MessageTurn, Tenant
from agentic_api.storage.tenants import IssuedKey
from agentic_api.wire.admin import (
    DEFAULT_LIST_LIMIT,
    MAX_DESCENDANTS,
    AdminApiKey,
    AdminConversation,
    AdminLineage,
    AdminMessageTurn,
    AdminTenant,
    AdminTokenAccount,
    AdminTurn,
    CacheStats,
    CacheStatsPage,
    CreateApiKeyRequest,
    CreateTenantRequest,
    Deletion,
    IssuedApiKey,
    ListPage,
    TenantCreated,
    TokenArtifactInfo,
    hit_ratio,
    list_page,
    metadata_filters,
    page_of,
    unix,
)
from agentic_api.wire.errors import ErrorBody
from agentic_api.wire.limits import (
    MAX_LIST_LIMIT,
    MAX_METADATA_KEY_LENGTH,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_LENGTH,
    MAX_MODEL_LENGTH,
    MAX_UNIX_SECONDS,
)
from agentic_api.wire.timeline import present_chain, present_timeline, present_tree
from agentic_api.wire.token_account import account_view

# Only documents the scheme in OpenAPI (auto_error off); require_admin does the checking.
_admin_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="AdminKey",
    description="An admin key (sk-agentic-admin-…); tenant API keys are refused.",
)
# Every failure is an OpenAI-shaped ErrorBody; "4XX" also stands in for FastAPI's default
# 422 entry, which would be wrong here (validation errors are rendered as 400s).
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "Invalid parameters"),
        (401, "Missing, unknown or non-admin key"),
        (404, "No such object"),
        ("4XX", "Any other client error"),
    )
}
router = APIRouter(
    prefix="/admin/v1",
    tags=["admin"],
    dependencies=[Depends(_admin_bearer), Depends(require_admin)],
    responses=_ERRORS,
)

After = Annotated[str | None, Query(description="Cursor: the last id of the previous page.")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT, description="Page size, 1-100.")]
UnixTime = Annotated[
    int | None, Query(ge=0, le=MAX_UNIX_SECONDS, description="Unix seconds (to year 9999).")
]


def _at(seconds: int | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _forget_cached_keys(request: Request) -> None:
    # Resolved keys are cached for a few seconds; a disable, rotation or revocation must
    # bite on the next request. Called after the commit, so nothing can re-cache the old
    # state in between. (Other server processes still honour their own short cache.)
    cache: KeyCache = request.app.state.key_cache
    cache.clear()


def _tenant_not_found(tenant_id: str) -> NotFound:
    return NotFound(f"No tenant with id '{tenant_id}'.", param="tenant_id")


def _conversation_not_found(conversation_id: str) -> NotFound:
    return NotFound(f"No conversation with id '{conversation_id}'.", param="conversation_id")


def _tenant(row: Tenant) -> AdminTenant:
    return AdminTenant(
        id=row.id,
        name=row.name,
        status="disabled" if row.disabled_at else "active",
        created_at=int(row.created_at.timestamp()),
        disabled_at=unix(row.disabled_at),
        salt_epoch=row.salt_epoch,
    )


def _key(row: ApiKey) -> AdminApiKey:
    return AdminApiKey(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        display_prefix=row.key_prefix,
        status="revoked" if row.revoked_at else "active",
        created_at=int(row.created_at.timestamp()),
        revoked_at=unix(row.revoked_at),
    )


def _issued(row: ApiKey, issued: IssuedKey) -> IssuedApiKey:
    return IssuedApiKey(**_key(row).model_dump(), key=issued.plaintext)


def _conversation(row: ConversationRecord) -> AdminConversation:
    return AdminConversation(
        id=row.id,
        tenant_id=row.tenant_id,
        created_at=int(row.created_at.timestamp()),
        updated_at=int(row.updated_at.timestamp()),
        metadata=row.metadata or {},
        head_response_id=row.head_response_id,
        turn_count=row.turn_count,
    )


def _message_turn(row: MessageTurn) -> AdminMessageTurn:
    return AdminMessageTurn(
        id=row.id,
        created_at=int(row.created_at.timestamp()),
        session_id=row.session_id,
        session_source=row.session_source,
        model=row.model,
        stream=row.stream,
        status=row.status,
        stop_reason=row.stop_reason,
        message_id=row.message_id,
        message_count=row.message_count,
        input_tokens=row.input_tokens,
        cached_tokens=row.cached_tokens,
        cache_creation_tokens=row.cache_creation_tokens,
        output_tokens=row.output_tokens,
        hit_ratio=hit_ratio(row.input_tokens, row.cached_tokens),
    )


def _stats(row: UsageTotals) -> CacheStats:
    return CacheStats(
        model=row.model,
        turns=row.turns,
        input_tokens=row.input_tokens,
        cached_tokens=row.cached_tokens,
        output_tokens=row.output_tokens,
        hit_ratio=hit_ratio(row.input_tokens, row.cached_tokens),
    )


async def _require_tenant(repo: AdminRepository, tenant_id: str) -> Tenant:
    tenant = await repo.tenants.get(tenant_id)
    if tenant is None:
        raise _tenant_not_found(tenant_id)
    return tenant


# -- tenants --------------------------------------------------------------------------------


@router.get("/tenants", summary="List tenants (oldest first)")
async def list_tenants(
    request: Request, after: After = None, limit: Limit = DEFAULT_LIST_LIMIT
) -> ListPage[AdminTenant]:
    async with services_of(request).db.read() as session:
        rows, more = page_of(
            await AdminRepository(session).list_tenants(after=after, limit=limit), limit
        )
    return list_page([_tenant(r) for r in rows], more, lambda t: t.id)


@router.post(
    "/tenants",
    summary="Create a tenant and its first API key (shown once)",
    responses={409: {"model": ErrorBody, "description": "The name is taken"}},
)
async def create_tenant(body: CreateTenantRequest, request: Request) -> TenantCreated:
    try:
        async with services_of(request).db.write() as session:
            repo = AdminRepository(session)
            tenant, key, issued = await repo.create_tenant(body.name, body.key_name)
    except DuplicateTenantName as exc:
        raise Conflict(
            f"A tenant named '{body.name}' already exists.", param="name", code="tenant_exists"
        ) from exc
    return TenantCreated(tenant=_tenant(tenant), api_key=_issued(key, issued))


@router.get("/tenants/{tenant_id}", summary="Get one tenant")
async def get_tenant(tenant_id: str, request: Request) -> AdminTenant:
    async with services_of(request).db.read() as session:
        return _tenant(await _require_tenant(AdminRepository(session), tenant_id))


async def _set_disabled(request: Request, tenant_id: str, disabled: bool) -> AdminTenant:
    async with services_of(request).db.write() as session:
        tenant = await AdminRepository(session).set_disabled(tenant_id, disabled)
    if tenant is None:
        raise _tenant_not_found(tenant_id)
    _forget_cached_keys(request)
    return _tenant(tenant)


@router.post("/tenants/{tenant_id}/disable", summary="Disable a tenant: its keys stop working")
async def disable_tenant(tenant_id: str, request: Request) -> AdminTenant:
    return await _set_disabled(request, tenant_id, True)


@router.post("/tenants/{tenant_id}/enable", summary="Enable a disabled tenant")
async def enable_tenant(tenant_id: str, request: Request) -> AdminTenant:
    return await _set_disabled(request, tenant_id, False)


@router.post(
    "/tenants/{tenant_id}/rotate_salt",
    summary="Rotate the tenant's cache salt (bumps salt_epoch; its cached prefixes are lost)",
)
async def rotate_salt(tenant_id: str, request: Request) -> AdminTenant:
    async with services_of(request).db.write() as session:
        tenant = await AdminRepository(session).rotate_salt(tenant_id)
    if tenant is None:
        raise _tenant_not_found(tenant_id)
    _forget_cached_keys(request)
    return _tenant(tenant)


# -- API keys -------------------------------------------------------------------------------


@router.get("/tenants/{tenant_id}/api_keys", summary="List a tenant's API keys (never the keys)")
async def list_api_keys(
    tenant_id: str, request: Request, after: After = None, limit: Limit = DEFAULT_LIST_LIMIT
) -> ListPage[AdminApiKey]:
    async with services_of(request).db.read() as session:
        repo = AdminRepository(session)
        await _require_tenant(repo, tenant_id)
        rows, more = page_of(await repo.list_keys(tenant_id, after=after, limit=limit), limit)
    return list_page([_key(r) for r in rows], more, lambda k: k.id)


@router.post("/tenants/{tenant_id}/api_keys", summary="Issue an API key (shown once)")
async def issue_api_key(
    tenant_id: str, request: Request, body: CreateApiKeyRequest | None = None
) -> IssuedApiKey:
    name = body.name if body else None
    async with services_of(request).db.write() as session:
        repo = AdminRepository(session)
        tenant = await _require_tenant(repo, tenant_id)
        key, issued = await repo.issue_key(tenant, name)
    return _issued(key, issued)


@router.delete("/tenants/{tenant_id}/api_keys/{key_id}", summary="Revoke an API key")
async def revoke_api_key(tenant_id: str, key_id: str, request: Request) -> AdminApiKey:
    async with services_of(request).db.write() as session:
        key = await AdminRepository(session).revoke_key(tenant_id, key_id)
    if key is None:
        raise NotFound(f"Tenant '{tenant_id}' has no API key '{key_id}'.", param="key_id")
    _forget_cached_keys(request)
    return _key(key)


# -- conversations --------------------------------------------------------------------------


def _conversation_filter(
    request: Request, updated_since: int | None, model: str | None
) -> ConversationFilter:
    pairs = metadata_filters(request.query_params.multi_items())
    if len(pairs) > MAX_METADATA_PAIRS:
        raise InvalidRequest(f"At most {MAX_METADATA_PAIRS} metadata filters.", param="metadata")
    for key, value in pairs:
        if not key or len(key) > MAX_METADATA_KEY_LENGTH or len(value) > MAX_METADATA_VALUE_LENGTH:
            raise InvalidRequest(
                f"Metadata filter keys are 1-{MAX_METADATA_KEY_LENGTH} characters and values "
                f"at most {MAX_METADATA_VALUE_LENGTH}.",
                param=f"metadata[{key[:MAX_METADATA_KEY_LENGTH]}]",
                code="invalid_value",
            )
    return ConversationFilter(_at(updated_since), model, tuple(pairs))


@router.get(
    "/tenants/{tenant_id}/conversations",
    summary="List a tenant's conversations, newest first (by updated_at, then id)",
    openapi_extra={
        "parameters": [
            {
                "name": "metadata",
                "in": "query",
                "style": "deepObject",
                "explode": True,
                "required": False,
                "description": "metadata[key]=value: exact match on a metadata value.",
                "schema": {"type": "object", "additionalProperties": {"type": "string"}},
            }
        ]
    },
)
async def list_conversations(
    tenant_id: str,
    request: Request,
    after: After = None,
    limit: Limit = DEFAULT_LIST_LIMIT,
    updated_since: UnixTime = None,
    model: Annotated[
        str | None,
        Query(max_length=MAX_MODEL_LENGTH, description="Has a turn run on this model."),
    ] = None,
) -> ListPage[AdminConversation]:
    filters = _conversation_filter(request, updated_since, model)
    async with services_of(request).db.read() as session:
        repo = AdminRepository(session)
        await _require_tenant(repo, tenant_id)
        cursor = None
        if after is not None:
            cursor = await repo.get_conversation(tenant_id, after)
            if cursor is None:
                raise InvalidRequest(
                    f"Unknown cursor: no conversation '{after}'.",
                    param="after",
                    code="invalid_value",
                )
        rows = await repo.list_conversations(tenant_id, filters, after=cursor, limit=limit)
    page, more = page_of(rows, limit)
    return list_page([_conversation(r) for r in page], more, lambda c: c.id)


@router.get("/tenants/{tenant_id}/conversations/{conversation_id}", summary="Get a conversation")
async def get_conversation(
    tenant_id: str, conversation_id: str, request: Request
) -> AdminConversation:
    async with services_of(request).db.read() as session:
        row = await AdminRepository(session).get_conversation(tenant_id, conversation_id)
    if row is None:
        raise _conversation_not_found(conversation_id)
    return _conversation(row)


@router.get(
    "/tenants/{tenant_id}/conversations/{conversation_id}/timeline",
    summary="A conversation's turns in order: usage, lineage, fingerprint and cache breaks",
)
async def conversation_timeline(
    tenant_id: str,
    conversation_id: str,
    request: Request,
    after: After = None,
    limit: Limit = DEFAULT_LIST_LIMIT,
) -> ListPage[AdminTurn]:
    async with services_of(request).db.read() as session:
        repo = AdminRepository(session)
        if await repo.get_conversation(tenant_id, conversation_id) is None:
            raise _conversation_not_found(conversation_id)
        rows, more = page_of(
            await repo.conversation_turns(tenant_id, conversation_id, after=after, limit=limit),
            limit,
        )
        before = await repo.turn_before(tenant_id, conversation_id, rows[0].id) if rows else None
    shown = present_timeline(rows, before)
    annotate_timeline(shown, rows, before, services_of(request).residency)
    return list_page(shown, more, lambda t: t.id)


@router.delete(
    "/tenants/{tenant_id}/conversations/{conversation_id}",
    summary="Delete a conversation with its items, turns and their continuations",
)
async def delete_conversation(tenant_id: str, conversation_id: str, request: Request) -> Deletion:
    async with services_of(request).db.write() as session:
        counts = await AdminRepository(session).delete_conversation(tenant_id, conversation_id)
    if counts is None:
        raise _conversation_not_found(conversation_id)
    return Deletion(tenant_id=tenant_id, conversation_id=conversation_id, deleted=counts)


@router.delete(
    "/tenants/{tenant_id}/data",
    summary="Purge all of a tenant's responses, items, events, conversations and recorded "
    "Messages turns",
)
async def purge_tenant_data(tenant_id: str, request: Request) -> Deletion:
    async with services_of(request).db.write() as session:
        repo = AdminRepository(session)
        await _require_tenant(repo, tenant_id)
        counts = await repo.purge_tenant_data(tenant_id)
    return Deletion(tenant_id=tenant_id, conversation_id=None, deleted=counts)


# -- lineage and statistics -------------------------------------------------------------------


@router.get(
    "/responses/{response_id}/lineage",
    summary="A response's ancestors (root first) and its descendants and forks as a tree",
)
async def response_lineage(response_id: str, request: Request) -> AdminLineage:
    async with services_of(request).db.read() as session:
        repo = AdminRepository(session)
        chain = await repo.ancestors(response_id)
        if not chain:
            raise NotFound(f"No response with id '{response_id}'.", param="response_id")
        descendants = await repo.descendants(response_id, limit=MAX_DESCENDANTS)
    shown = descendants[:MAX_DESCENDANTS]
    return AdminLineage(
        response_id=response_id,
        tenant_id=chain[-1].tenant_id,
        ancestors=present_chain(chain),
        descendants=present_tree(chain[-1], shown),
        descendant_count=len(shown),
        truncated=len(descendants) > MAX_DESCENDANTS,
    )


@router.get(
    "/responses/{response_id}/token_account",
    summary="A response's token-level reuse account (expected, measured, token-exact "
    "reusable tokens, the cause of any loss) and its stored token ids",
)
async def token_account(response_id: str, request: Request) -> AdminTokenAccount:
    async with services_of(request).db.read() as session:
        repo = AdminRepository(session)
        chain = await repo.ancestors(response_id)
        if not chain:
            raise NotFound(f"No response with id '{response_id}'.", param="response_id")
        artifact = await repo.token_artifact(response_id)
    turn = chain[-1]
    return AdminTokenAccount(
        response_id=turn.id,
        tenant_id=turn.tenant_id,
        model=turn.model,
        account=account_view(turn.token_account) if turn.token_account else None,
        artifact=None
        if artifact is None
        else TokenArtifactInfo(
            prompt_tokens=artifact.prompt_count,
            output_tokens=artifact.output_count,
            stored_bytes=len(artifact.prompt_ids) + len(artifact.output_ids),
            encoding=artifact.encoding,
            model=artifact.model,
            tokenizer=artifact.tokenizer,
            created_at=int(artifact.created_at.timestamp()),
        ),
    )


@router.get(
    "/tenants/{tenant_id}/cache_stats",
    summary="Cache statistics per model (and in total) over an optional time window",
)
async def cache_stats(
    tenant_id: str,
    request: Request,
    since: UnixTime = None,
    until: UnixTime = None,
    after: Annotated[str | None, Query(description="Cursor: the last model seen.")] = None,
    limit: Limit = DEFAULT_LIST_LIMIT,
    api: Annotated[
        UsageApi,
        Query(description="Count Responses turns, recorded Anthropic Messages turns, or both."),
    ] = "all",
) -> CacheStatsPage:
    if since is not None and until is not None and until <= since:
        raise InvalidRequest("'until' must be later than 'since'.", param="until")
    window = Window(_at(since), _at(until))
    async with services_of(request).db.read() as session:
        repo = AdminRepository(session)
        await _require_tenant(repo, tenant_id)
        rows, more = page_of(
            await repo.usage_by_model(tenant_id, window, after=after, limit=limit, api=api),
            limit,
        )
        total = await repo.usage_total(tenant_id, window, api)
    data = [_stats(r) for r in rows]
    return CacheStatsPage(
        data=data,
        first_id=data[0].model if data else None,
        last_id=data[-1].model if data else None,
        has_more=more,
        tenant_id=tenant_id,
        since=since,
        until=until,
        api=api,
        total=_stats(total),
    )


@router.get(
    "/tenants/{tenant_id}/message_turns",
    summary="Recorded Anthropic Messages API turns, oldest first (optionally of one session)",
)
async def list_message_turns(
    tenant_id: str,
    request: Request,
    session_id: Annotated[
        str | None, Query(max_length=200, description="Only this session's turns.")
    ] = None,
    after: After = None,
    limit: Limit = DEFAULT_LIST_LIMIT,
) -> ListPage[AdminMessageTurn]:
    async with services_of(request).db.read() as session:
        await _require_tenant(AdminRepository(session), tenant_id)
        rows, more = page_of(
            await MessageTurnRepository(session).list(
                tenant_id, session_id=session_id, after=after, limit=limit
            ),
            limit,
        )
    return list_page([_message_turn(r) for r in rows], more, lambda t: t.id)
