"""``GET /metrics``: Prometheus exposition of agentic_api.metrics (and process metrics).

Unauthenticated, like most exporters: keep it on an internal network or turn it off with
``AGENTIC_METRICS_ENABLED=false``. Labels carry tenant ids, never names or keys.
"""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from starlette.responses import Response

router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
