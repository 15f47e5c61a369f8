"""What several routers declare alike, written once: the caller's tenant, a list's paging
parameters, a JSON body documented from its model, and the OpenAI-shaped error answers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Depends, Query
from pydantic import BaseModel

from agentic_api.http.auth import require_tenant
from agentic_api.serving.tenants import TenantContext
from agentic_api.wire.errors import ErrorBody
from agentic_api.wire.limits import MAX_LIST_LIMIT

Tenant = Annotated[TenantContext, Depends(require_tenant)]
ListLimit = Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)]
ListOrder = Literal["asc", "desc"]


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting a required JSON body: such routes read the body raw
    and validate it in ``wire/`` (so a failure is an OpenAI-shaped 400, not FastAPI's 422),
    which leaves FastAPI nothing to document it from."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def error_responses(*answers: tuple[int | str, str]) -> dict[int | str, dict[str, Any]]:
    """A router's documented failures, each an OpenAI-shaped ``ErrorBody``; give "4XX" too,
    so it stands in for FastAPI's default 422 entry, which would be wrong here (validation
    errors are rendered as 400s)."""
    return {status: {"model": ErrorBody, "description": text} for status, text in answers}
