"""The Response object as strict clients validate it: every field present, even when null."""

from __future__ import annotations

from typing import Any

from agentic_api.wire.requests import CreateResponseRequest

DEFAULT_TEXT: dict[str, Any] = {"format": {"type": "text"}, "verbosity": "medium"}
DEFAULT_REASONING: dict[str, Any] = {"effort": None, "summary": None}
_TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})


def empty_usage() -> dict[str, Any]:
    return {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }


def normalize_usage(raw: Any) -> dict[str, Any]:
    """Upstream usage in OpenAI's shape; missing counters are 0, never absent."""
    usage = empty_usage()
    if not isinstance(raw, dict):
        return usage
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        if isinstance(raw.get(key), int):
            usage[key] = raw[key]
    for key, inner in (
        ("input_tokens_details", "cached_tokens"),
        ("output_tokens_details", "reasoning_tokens"),
    ):
        details = raw.get(key)
        if isinstance(details, dict):
            merged = {**details}
            merged[inner] = details.get(inner) if isinstance(details.get(inner), int) else 0
            usage[key] = merged
    if not usage["total_tokens"]:
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    return usage


def base_response(
    request: CreateResponseRequest,
    *,
    response_id: str,
    created_at: int,
    conversation_id: str | None,
) -> dict[str, Any]:
    """The object in state ``in_progress``, before the model has produced anything."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": request.background,
        "completed_at": None,
        "conversation": {"id": conversation_id} if conversation_id else None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "metadata": request.metadata or {},
        "model": request.model,
        "output": [],
        "parallel_tool_calls": (
            True if request.parallel_tool_calls is None else request.parallel_tool_calls
        ),
        "previous_response_id": request.previous_response_id,
        "prompt_cache_key": request.prompt_cache_key,
        "prompt_cache_retention": (request.model_extra or {}).get("prompt_cache_retention"),
        "reasoning": request.reasoning or dict(DEFAULT_REASONING),
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier or "auto",
        "store": request.store,
        "temperature": request.temperature,
        "text": request.text or dict(DEFAULT_TEXT),
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": request.tools or [],
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "truncation": request.truncation or "disabled",
        "usage": None,
        "user": request.user,
        "presence_penalty": (request.model_extra or {}).get("presence_penalty", 0.0),
        "frequency_penalty": (request.model_extra or {}).get("frequency_penalty", 0.0),
    }


def finish_response(
    base: dict[str, Any],
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    completed_at: int | None,
    upstream: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    assert status in _TERMINAL
    final = {
        **base,
        "status": status,
        "output": output,
        "usage": usage,
        "error": error,
        "incomplete_details": incomplete_details,
    }
    final["completed_at"] = completed_at if status == "completed" else None
    if upstream:
        # Sampling defaults the client left open are whatever the model server applied.
        for key in ("temperature", "top_p"):
            if final.get(key) is None and isinstance(upstream.get(key), int | float):
                final[key] = upstream[key]
    for key, default in (("temperature", 1.0), ("top_p", 1.0)):
        if final.get(key) is None:
            final[key] = default
    return final
