"""Admin views built from stored rows: tenants, keys, conversations, Messages turns,
usage totals, and the cursor list page they are listed in."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from agentic_api.operator.queries.admin import ConversationRecord, UsageTotals
from agentic_api.operator.shapes.admin import (
    AdminApiKey,
    AdminConversation,
    AdminMessageTurn,
    AdminTenant,
    CacheStats,
    IssuedApiKey,
    ListPage,
    hit_ratio,
)
from agentic_api.storage.models import ApiKey, MessageTurn, Tenant
from agentic_api.storage.tenants import IssuedKey

T = TypeVar("T")


def list_page(items: list[T], has_more: bool, id_of: Callable[[T], str]) -> ListPage[T]:
    return ListPage[T](
        data=items,
        first_id=id_of(items[0]) if items else None,
        last_id=id_of(items[-1]) if items else None,
        has_more=has_more,
    )


def unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def tenant_view(row: Tenant) -> AdminTenant:
    return AdminTenant(
        id=row.id,
        name=row.name,
        status="disabled" if row.disabled_at else "active",
        created_at=int(row.created_at.timestamp()),
        disabled_at=unix(row.disabled_at),
        salt_epoch=row.salt_epoch,
    )


def key_view(row: ApiKey) -> AdminApiKey:
    return AdminApiKey(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        display_prefix=row.key_prefix,
        status="revoked" if row.revoked_at else "active",
        created_at=int(row.created_at.timestamp()),
        revoked_at=unix(row.revoked_at),
    )


def issued_view(row: ApiKey, issued: IssuedKey) -> IssuedApiKey:
    return IssuedApiKey(**key_view(row).model_dump(), key=issued.plaintext)


def conversation_view(row: ConversationRecord) -> AdminConversation:
    return AdminConversation(
        id=row.id,
        tenant_id=row.tenant_id,
        created_at=int(row.created_at.timestamp()),
        updated_at=int(row.updated_at.timestamp()),
        metadata=row.metadata or {},
        head_response_id=row.head_response_id,
        turn_count=row.turn_count,
    )


def message_turn_view(row: MessageTurn) -> AdminMessageTurn:
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


def stats_view(row: UsageTotals) -> CacheStats:
    return CacheStats(
        model=row.model,
        turns=row.turns,
        input_tokens=row.input_tokens,
        cached_tokens=row.cached_tokens,
        output_tokens=row.output_tokens,
        hit_ratio=hit_ratio(row.input_tokens, row.cached_tokens),
    )
