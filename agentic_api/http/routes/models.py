"""/v1/models, proxied from the upstream (briefly cached by the client)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from agentic_api.errors import NotFound
from agentic_api.http.auth import services_of
from agentic_api.http.route_parts import Tenant

router = APIRouter(tags=["models"])


@router.get("/v1/models")
async def list_models(request: Request, _tenant: Tenant) -> dict[str, Any]:
    return await services_of(request).upstream_now().models()


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request, _tenant: Tenant) -> dict[str, Any]:
    listing = await services_of(request).upstream_now().models()
    for model in listing.get("data", []):
        if isinstance(model, dict) and model.get("id") == model_id:
            return model
    raise NotFound(f"The model '{model_id}' does not exist", param="model", code="model_not_found")
