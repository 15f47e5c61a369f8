"""Stored rows as the admin API's wire shapes, for the console's pages."""

from __future__ import annotations

from agentic_api.storage.admin import UsageTotals
from agentic_api.storage.models import Tenant
from agentic_api.wire.admin import AdminTenant, CacheStats, hit_ratio, unix


def tenant_view(row: Tenant) -> AdminTenant:
    return AdminTenant(
        id=row.id,
        name=row.name,
        status="disabled" if row.disabled_at else "active",
        created_at=int(row.created_at.timestamp()),
        disabled_at=unix(row.disabled_at),
        salt_epoch=row.salt_epoch,
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
