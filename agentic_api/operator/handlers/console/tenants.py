"""The tenant list and one tenant's cache statistics, in total and over time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from agentic_api.cache.accounting import Cause
from agentic_api.operator.handlers.admin.views import stats_view, tenant_view
from agentic_api.operator.queries.admin import AdminRepository, UsageTotals, Window
from agentic_api.operator.queries.console import ConsoleRepository, LostBucket, UsageBucket
from agentic_api.operator.shapes.admin import AdminTenant, CacheStats, hit_ratio
from agentic_api.runtime import Runtime
from agentic_api.wire.limits import MAX_LIST_LIMIT

# The chart windows a page offers, each with the bucket its points are summed over.
Span = Literal["1h", "24h", "7d", "30d"]
SPANS: dict[Span, tuple[timedelta, int]] = {
    "1h": (timedelta(hours=1), 300),
    "24h": (timedelta(hours=24), 3600),
    "7d": (timedelta(days=7), 6 * 3600),
    "30d": (timedelta(days=30), 24 * 3600),
}


@dataclass(frozen=True)
class TenantRow:
    tenant: AdminTenant
    turns: int
    input_tokens: int
    cached_tokens: int
    lost_tokens: int
    hit_ratio: float | None


@dataclass(frozen=True)
class TenantList:
    rows: list[TenantRow]
    total: int


async def list_tenants(services: Runtime, *, offset: int, limit: int) -> TenantList:
    """A page of tenants with their usage: two statements whatever the page holds."""
    async with services.db.read() as session:
        repo = ConsoleRepository(session)
        tenants, total = await repo.tenants(offset=offset, limit=limit)
        usage = await repo.tenant_usage([t.id for t in tenants])
    rows = []
    for tenant in tenants:
        used = usage.get(tenant.id)
        turns, input_tokens, cached, lost = (
            (used.turns, used.input_tokens, used.cached_tokens, used.lost_tokens)
            if used
            else (0, 0, 0, 0)
        )
        rows.append(
            TenantRow(
                tenant_view(tenant),
                turns,
                input_tokens,
                cached,
                lost,
                hit_ratio(input_tokens, cached),
            )
        )
    return TenantList(rows, total)


@dataclass(frozen=True)
class TenantSeries:
    """Turns and lost tokens per time bucket over a span (what the charts draw)."""

    span: Span
    since: datetime
    bucket_seconds: int
    usage: list[UsageBucket]
    lost: list[LostBucket]

    @property
    def lost_by_cause(self) -> dict[str, int]:
        """Lost tokens in the span, per cause, largest first."""
        totals: dict[str, int] = {}
        for bucket in self.lost:
            totals[bucket.cause] = totals.get(bucket.cause, 0) + bucket.tokens
        return dict(sorted(totals.items(), key=lambda item: (-item[1], item[0])))


@dataclass(frozen=True)
class TenantOverview:
    tenant: AdminTenant
    # All time, as GET /admin/v1/tenants/{id}/cache_stats answers (api=all).
    by_model: list[CacheStats]
    total: CacheStats
    series: TenantSeries


# Every cause a token account may record lost tokens under, in the order charts list them.
LOST_CAUSES = tuple(cause.value for cause in Cause)


def _window(span: Span, now: datetime | None) -> tuple[datetime, int]:
    length, bucket = SPANS[span]
    # Buckets start on multiples of their length, so the window starts on one too.
    end = (now or datetime.now(UTC)).timestamp()
    return datetime.fromtimestamp((end - length.total_seconds()) // bucket * bucket, UTC), bucket


async def _series(
    repo: ConsoleRepository, tenant_id: str, span: Span, now: datetime | None
) -> TenantSeries:
    since, bucket = _window(span, now)
    usage = await repo.usage_series(tenant_id, since, bucket)
    lost = await repo.lost_series(tenant_id, since, bucket, LOST_CAUSES)
    return TenantSeries(span, since, bucket, usage, lost)


async def tenant_series(
    services: Runtime, tenant_id: str, span: Span, *, now: datetime | None = None
) -> TenantSeries | None:
    """Only the time series (for a chart): three statements."""
    async with services.db.read() as session:
        repo = ConsoleRepository(session)
        if await repo.tenant(tenant_id) is None:
            return None
        return await _series(repo, tenant_id, span, now)


def _summed(rows: Sequence[UsageTotals]) -> UsageTotals:
    return UsageTotals(
        None,
        sum(row.turns for row in rows),
        sum(row.input_tokens for row in rows),
        sum(row.cached_tokens for row in rows),
        sum(row.output_tokens for row in rows),
    )


async def tenant_overview(
    services: Runtime, tenant_id: str, span: Span, *, now: datetime | None = None
) -> TenantOverview | None:
    async with services.db.read() as session:
        admin = AdminRepository(session)
        tenant = await admin.tenants.get(tenant_id)
        if tenant is None:
            return None
        by_model = await admin.usage_by_model(tenant_id, Window(), after=None, limit=MAX_LIST_LIMIT)
        # Every model listed: the total is their sum, without scanning the turns again.
        total = (
            _summed(by_model)
            if len(by_model) <= MAX_LIST_LIMIT
            else await admin.usage_total(tenant_id, Window())
        )
        series = await _series(ConsoleRepository(session), tenant_id, span, now)
    return TenantOverview(
        tenant=tenant_view(tenant),
        by_model=[stats_view(row) for row in by_model[:MAX_LIST_LIMIT]],
        total=stats_view(total),
        series=series,
    )
