"""``GET /metrics``: Prometheus exposition of agentic_api.metrics (and process metrics when
``serve`` runs one worker; with several, every worker's values merged).

Unauthenticated, like most exporters: keep it on an internal network or turn it off with
``AGENTIC_METRICS_ENABLED=false``. Labels carry tenant ids, never names or keys.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from agentic_api.metrics import exposition

router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    # Off the event loop: with several workers this reads and merges their files.
    return Response(await asyncio.to_thread(exposition), media_type=CONTENT_TYPE_LATEST)
