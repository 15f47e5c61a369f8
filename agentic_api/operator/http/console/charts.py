"""A tenant's charts, as SVG documents served on their own (``image/svg+xml``, shown by
``<img>``): drawn by ``agentic_api.charts`` (pygal) from the same series the page shows,
so the page's tables and its charts are one set of numbers."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentic_api.charts import bar_chart, line_chart
from agentic_api.http.auth import services_of
from agentic_api.operator.handlers.console.tenants import SPANS, TenantSeries, tenant_series
from agentic_api.operator.http.console.gate import viewer
from agentic_api.operator.http.console.headers import CHART_POLICY, harden
from agentic_api.operator.http.console.params import BadParameter, choice

router = APIRouter(prefix="/console", include_in_schema=False)


def _label(start: int, series: TenantSeries) -> str:
    moment = datetime.fromtimestamp(start, UTC)
    return moment.strftime("%m-%d %H:%M" if series.bucket_seconds < 86400 else "%Y-%m-%d")


def hit_ratio_chart(series: TenantSeries) -> str:
    """Hit ratio per bucket, x in hours from the span's start."""
    origin = series.since.timestamp()
    points = [
        (
            (b.start - origin) / 3600,
            100 * b.cached_tokens / b.input_tokens if b.input_tokens else None,
        )
        for b in series.usage
    ]
    return line_chart(
        f"Cache hit ratio, last {series.span}",
        {"hit ratio %": points},
        x_title=f"hours since {series.since:%Y-%m-%d %H:%M} UTC",
        y_title="cached / input tokens, %",
        y_range=(0, 100),
    )


def lost_chart(series: TenantSeries) -> str:
    """Lost tokens per bucket, stacked by cause."""
    starts = sorted({b.start for b in series.lost})
    causes = list(series.lost_by_cause)
    values = {(b.start, b.cause): b.tokens for b in series.lost}
    return bar_chart(
        f"Lost tokens by cause, last {series.span}",
        [_label(start, series) for start in starts],
        {cause: [values.get((start, cause), 0) for start in starts] for cause in causes},
        stacked=True,
        y_title="tokens",
    )


_CHARTS = {"hit_ratio": hit_ratio_chart, "lost": lost_chart}


@router.get("/tenants/{tenant_id}/charts/{name}.svg")
async def chart(request: Request) -> Response:
    draw = _CHARTS.get(request.path_params["name"])
    if await viewer(request) is None or draw is None:
        return harden(Response(status_code=404), policy=CHART_POLICY)
    try:
        span = choice(request, "span", tuple(SPANS), "24h")
    except BadParameter:
        return harden(Response(status_code=400), policy=CHART_POLICY)
    series = await tenant_series(services_of(request), request.path_params["tenant_id"], span)
    if series is None:
        return harden(Response(status_code=404), policy=CHART_POLICY)
    return harden(Response(draw(series), media_type="image/svg+xml"), policy=CHART_POLICY)
