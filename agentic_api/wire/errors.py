"""The error body every route documents: OpenAI's ``{"error": {...}}`` shape."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """Every failure, OpenAI-style."""

    error: ErrorDetail
