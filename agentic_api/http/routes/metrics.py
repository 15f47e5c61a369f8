"""``GET /metrics``: Prometheus exposition of agentic_api.metrics (and process metrics when
``serve`` runs one worker; with several, every worker's values merged).

Open by default, like most exporters (keep it on an internal network); with
``AGENTIC_METRICS_TOKEN`` set, only a scrape that sends that token as a bearer credential
is answered. Labels never carry tenant names or keys, and carry tenant ids only when
``AGENTIC_METRICS_TENANT_LABELS`` asks for them. ``AGENTIC_METRICS_ENABLED=false`` removes
the route.
"""

from __future__ import annotations

import asyncio
import hmac

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from agentic_api.errors import Unauthorized
from agentic_api.http.auth import bearer_token, credential_header, services_of
from agentic_api.metrics import exposition

router = APIRouter(tags=["metrics"])


def _require_scrape_token(request: Request) -> None:
    expected = services_of(request).settings.metrics_token
    if expected is None:
        return
    token = bearer_token(credential_header(request))
    if token is None:
        raise Unauthorized(
            "GET /metrics needs the metrics token (AGENTIC_METRICS_TOKEN) as "
            "'Authorization: Bearer <token>'.",
            code="missing_api_key",
        )
    # Constant time: the comparison must not tell a guesser how much of the token it has.
    if not hmac.compare_digest(token.encode(), expected.get_secret_value().encode()):
        raise Unauthorized("Incorrect metrics token provided.")


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    _require_scrape_token(request)
    # Off the event loop: with several workers this reads and merges their files.
    return Response(await asyncio.to_thread(exposition), media_type=CONTENT_TYPE_LATEST)
