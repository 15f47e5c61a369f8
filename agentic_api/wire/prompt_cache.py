"""``prompt_cache_options`` (openai 3.57's ``PromptCacheOptions``) as this server applies it.

vLLM's prefix cache is automatic: every full block of a computed prompt is cached and kept
until the engine's LRU evicts it. So of OpenAI's options only what matches that is
accepted: ``mode: implicit`` (``explicit`` with no breakpoints means "no caching" at OpenAI,
and vLLM cannot turn caching off per request) and ``ttl: 30m`` (the default; vLLM has no
lifetimes, so it is echoed as OpenAI's default, never as a promise: README says so).
``comparison_response_id`` asks for ``prompt_cache_diagnostics``. ``prewarm: true`` sends
the turn's prompt upstream for the fewest output tokens vLLM accepts and stores nothing
(``turns/prewarm.py``): the one lever vLLM offers to fill its cache ahead of a turn.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentic_api.errors import InvalidRequest
from agentic_api.wire.limits import MAX_ID_LENGTH
from agentic_api.wire.storable import check_no_nul

# What vLLM's automatic prefix cache can honour; README's "prompt_cache_options" row.
APPLIED_MODES = ("implicit",)
APPLIED_TTLS = ("30m",)


class PromptCacheOptions(BaseModel):
    """The request's options with the SDK's types; values we cannot honour are refused by
    ``wire/create_fields.py`` with ``unsupported_value``."""

    model_config = ConfigDict(extra="forbid")
    comparison_response_id: str | None = Field(
        None, min_length=1, max_length=MAX_ID_LENGTH, strict=True
    )
    mode: Literal["implicit", "explicit"] = "implicit"
    ttl: Literal["30m", "12h"] = "30m"
    prewarm: bool = Field(False, strict=True)

    @field_validator("comparison_response_id")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        if value is not None:
            check_no_nul(value, "prompt_cache_options.comparison_response_id")
        return value

    def echoed(self) -> dict[str, Any]:
        """``Response.prompt_cache_options``: the options that were applied (``prewarm``
        only when it was: the SDK's echoed type has no such key, so a plain turn's echo
        keeps its exact shape)."""
        echoed: dict[str, Any] = {
            "mode": self.mode,
            "ttl": self.ttl,
            "comparison_response_id": self.comparison_response_id,
        }
        if self.prewarm:
            echoed["prewarm"] = True
        return echoed


def check_prewarm(options: PromptCacheOptions | None, *, background: bool) -> None:
    """What a prewarm cannot be combined with, refused before anything runs: it stores
    nothing, and a background response is a stored one; diagnostics come from a stored
    turn's token account."""
    if options is None or not options.prewarm:
        return
    if background:
        raise InvalidRequest(
            "A prewarm stores nothing, and a background response is stored: send "
            "prompt_cache_options.prewarm without 'background'.",
            param="background",
            code="invalid_value",
        )
    if options.comparison_response_id is not None:
        raise InvalidRequest(
            "prompt_cache_diagnostics are computed from a stored turn's token account, and "
            "a prewarm stores nothing: send comparison_response_id with the real turn.",
            param="prompt_cache_options.comparison_response_id",
            code="invalid_value",
        )
