"""/admin/v1: the operator's inspection API (admin keys only; tenant keys get 401).

Read-only except for the tenant lifecycle (create, disable, rotate salt, keys) and two
explicit destructive actions (delete a conversation, purge a tenant's data). What each
route reads or changes is in ``serving.admin``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.security import HTTPBearer

from agentic_api.errors import InvalidRequest
from agentic_api.http.auth import require_admin, services_of
from agentic_api.http.route_parts import error_responses
from agentic_api.operator.handlers.admin import conversations, lineage, tenants, usage
from agentic_api.operator.shapes.admin import (
    DEFAULT_LIST_LIMIT,
    AdminAgentAccounts,
    AdminApiKey,
    AdminConversation,
    AdminLineage,
    AdminMessageTurn,
    AdminTenant,
    AdminTokenAccount,
    AdminTurn,
    CacheStatsPage,
    CreateApiKeyRequest,
    CreateTenantRequest,
    Deletion,
    IssuedApiKey,
    ListPage,
    TenantCreated,
    UsageApi,
    metadata_filters,
)
from agentic_api.serving.tenants import KeyMemo
from agentic_api.wire.limits import (
    MAX_LIST_LIMIT,
    MAX_METADATA_KEY_LENGTH,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_LENGTH,
    MAX_MODEL_LENGTH,
    MAX_UNIX_SECONDS,
)

# Only documents the scheme in OpenAPI (auto_error off); require_admin does the checking.
_admin_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="AdminKey",
    description="An admin key (sk-agentic-admin-…); tenant API keys are refused.",
)
_ERRORS = error_responses(
    (400, "Invalid parameters"),
    (401, "Missing, unknown or non-admin key"),
    (404, "No such object"),
    ("4XX", "Any other client error"),
)
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


def _forget_cached_keys(request: Request) -> None:
    # Resolved keys are cached for a few seconds; a disable, rotation or revocation must
    # bite on the next request. Called after the commit, so nothing can re-cache the old
    # state in between. (Other server processes still honour their own short cache.)
    memo: KeyMemo = request.app.state.key_memo
    memo.clear()


# -- tenants --------------------------------------------------------------------------------


@router.get("/tenants", summary="List tenants (oldest first)")
async def list_tenants(
    request: Request, after: After = None, limit: Limit = DEFAULT_LIST_LIMIT
) -> ListPage[AdminTenant]:
    return await tenants.list_tenants(services_of(request), after, limit)


@router.post(
    "/tenants",
    summary="Create a tenant and its first API key (shown once)",
    responses=error_responses((409, "The name is taken")),
)
async def create_tenant(body: CreateTenantRequest, request: Request) -> TenantCreated:
    return await tenants.create_tenant(services_of(request), body.name, body.key_name)


@router.get("/tenants/{tenant_id}", summary="Get one tenant")
async def get_tenant(tenant_id: str, request: Request) -> AdminTenant:
    return await tenants.get_tenant(services_of(request), tenant_id)


async def _set_disabled(request: Request, tenant_id: str, disabled: bool) -> AdminTenant:
    tenant = await tenants.set_disabled(services_of(request), tenant_id, disabled)
    _forget_cached_keys(request)
    return tenant


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
    tenant = await tenants.rotate_salt(services_of(request), tenant_id)
    _forget_cached_keys(request)
    return tenant


# -- API keys -------------------------------------------------------------------------------


@router.get("/tenants/{tenant_id}/api_keys", summary="List a tenant's API keys (never the keys)")
async def list_api_keys(
    tenant_id: str, request: Request, after: After = None, limit: Limit = DEFAULT_LIST_LIMIT
) -> ListPage[AdminApiKey]:
    return await tenants.list_api_keys(services_of(request), tenant_id, after, limit)


@router.post("/tenants/{tenant_id}/api_keys", summary="Issue an API key (shown once)")
async def issue_api_key(
    tenant_id: str, request: Request, body: CreateApiKeyRequest | None = None
) -> IssuedApiKey:
    name = body.name if body else None
    return await tenants.issue_api_key(services_of(request), tenant_id, name)


@router.delete("/tenants/{tenant_id}/api_keys/{key_id}", summary="Revoke an API key")
async def revoke_api_key(tenant_id: str, key_id: str, request: Request) -> AdminApiKey:
    key = await tenants.revoke_api_key(services_of(request), tenant_id, key_id)
    _forget_cached_keys(request)
    return key


# -- conversations --------------------------------------------------------------------------


def _metadata_filters(request: Request) -> list[tuple[str, str]]:
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
    return pairs


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
    return await conversations.list_conversations(
        services_of(request),
        tenant_id,
        updated_since=updated_since,
        model=model,
        metadata=_metadata_filters(request),
        after=after,
        limit=limit,
    )


@router.get("/tenants/{tenant_id}/conversations/{conversation_id}", summary="Get a conversation")
async def get_conversation(
    tenant_id: str, conversation_id: str, request: Request
) -> AdminConversation:
    return await conversations.get_conversation(services_of(request), tenant_id, conversation_id)


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
    return await conversations.timeline(
        services_of(request), tenant_id, conversation_id, after, limit
    )


@router.delete(
    "/tenants/{tenant_id}/conversations/{conversation_id}",
    summary="Delete a conversation with its items, turns and their continuations",
)
async def delete_conversation(tenant_id: str, conversation_id: str, request: Request) -> Deletion:
    return await conversations.delete_conversation(services_of(request), tenant_id, conversation_id)


@router.delete(
    "/tenants/{tenant_id}/data",
    summary="Purge all of a tenant's responses, items, events, conversations and recorded "
    "Messages turns",
)
async def purge_tenant_data(tenant_id: str, request: Request) -> Deletion:
    return await conversations.purge_tenant_data(services_of(request), tenant_id)


# -- lineage and statistics -------------------------------------------------------------------


@router.get(
    "/responses/{response_id}/lineage",
    summary="A response's ancestors (root first) and its descendants and forks as a tree",
)
async def response_lineage(response_id: str, request: Request) -> AdminLineage:
    return await lineage.response_lineage(services_of(request), response_id)


@router.get(
    "/responses/{response_id}/token_account",
    summary="A response's token-level reuse account (expected, measured, token-exact "
    "reusable tokens, the cause of any loss) and its stored token ids",
)
async def token_account(response_id: str, request: Request) -> AdminTokenAccount:
    return await lineage.token_account(services_of(request), response_id)


@router.get(
    "/responses/{response_id}/agents",
    summary="Each agent's token account of a multi-agent response (its rounds, and a "
    "subagent's first-request reuse against its parent's prefix)",
)
async def agent_accounts(response_id: str, request: Request) -> AdminAgentAccounts:
    return await lineage.agent_accounts(services_of(request), response_id)


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
    return await usage.cache_stats(
        services_of(request), tenant_id, since=since, until=until, after=after, limit=limit, api=api
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
    return await usage.list_message_turns(services_of(request), tenant_id, session_id, after, limit)
