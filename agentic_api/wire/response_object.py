"""The Response object and what it is made of (usage, output items, echoed tools, error)
as strict clients validate them: every field present, even when null; arrays never null;
numbers where numbers. Every path that shows a Response or an output item (JSON, SSE,
stored-event replay, background, WebSocket) builds it here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentic_api.errors import ApiError
from agentic_api.wire.events import (
    ITEM_STATUSES,
    RATE_LIMITED,
    SERVER_ERROR,
    TERMINAL_STATUSES,
)
from agentic_api.wire.requests import CreateResponseRequest

DEFAULT_TEXT: dict[str, Any] = {"format": {"type": "text"}, "verbosity": "medium"}
DEFAULT_REASONING: dict[str, Any] = {"effort": None, "summary": None}
# OpenAI's documented defaults, shown until the model server says what it applied.
DEFAULT_SAMPLING: dict[str, float] = {"temperature": 1.0, "top_p": 1.0}


# -- usage ------------------------------------------------------------------------------------


def usage_block(
    *,
    input_tokens: int = 0,
    cached_tokens: int = 0,
    cache_write_tokens: int | None = None,
    output_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """OpenAI's usage object. ``cache_write_tokens``: what this turn wrote to the prefix
    cache; when the model server does not say, everything it had to prefill (input minus
    cached tokens)."""
    if cache_write_tokens is None:
        cache_write_tokens = max(input_tokens - cached_tokens, 0)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached_tokens,
            "cache_write_tokens": cache_write_tokens,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def empty_usage() -> dict[str, Any]:
    return usage_block()


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalize_usage(raw: Any) -> dict[str, Any]:
    """The upstream's usage in OpenAI's shape: missing counters are 0, never absent, and
    fields of the model server's own (vLLM's per-turn lists) are left out."""
    if not isinstance(raw, dict):
        return usage_block()
    inputs = raw.get("input_tokens_details")
    inputs = inputs if isinstance(inputs, dict) else {}
    outputs = raw.get("output_tokens_details")
    outputs = outputs if isinstance(outputs, dict) else {}
    return usage_block(
        input_tokens=_count(raw.get("input_tokens")) or 0,
        cached_tokens=_count(inputs.get("cached_tokens")) or 0,
        # vLLM reports the full blocks it stored; keep its count when it gives one.
        cache_write_tokens=_count(inputs.get("cache_write_tokens")),
        output_tokens=_count(raw.get("output_tokens")) or 0,
        reasoning_tokens=_count(outputs.get("reasoning_tokens")) or 0,
    )


def add_usage(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Usage over several upstream rounds, as OpenAI reports a response that made several
    model calls."""
    return usage_block(
        input_tokens=total["input_tokens"] + more["input_tokens"],
        cached_tokens=total["input_tokens_details"]["cached_tokens"]
        + more["input_tokens_details"]["cached_tokens"],
        cache_write_tokens=total["input_tokens_details"]["cache_write_tokens"]
        + more["input_tokens_details"]["cache_write_tokens"],
        output_tokens=total["output_tokens"] + more["output_tokens"],
        reasoning_tokens=total["output_tokens_details"]["reasoning_tokens"]
        + more["output_tokens_details"]["reasoning_tokens"],
    )


# -- output items -----------------------------------------------------------------------------


def output_part(part: Any) -> Any:
    """An ``output_text`` part with its arrays (``annotations``, ``logprobs``) never null:
    vLLM sends ``logprobs: null``."""
    if not isinstance(part, dict) or part.get("type") != "output_text":
        return part
    fixed = dict(part)
    for key in ("annotations", "logprobs"):
        if not isinstance(fixed.get(key), list):
            fixed[key] = []
    return fixed


def output_item(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as the client sees it and as it is stored (and so replayed).

    Fixed once, before anyone sees or stores it, so the stream, the stored object and
    every later replay stay identical:

    - ``output_text`` parts get their arrays (``output_part``);
    - a message or function call without a status is ``completed`` (it is a finished
      item of a finished round);
    - vLLM 0.32 sometimes answers with an assistant message whose ``content`` is empty,
      and its own renderer fails (HTTP 500) when that message is replayed: it gets one
      empty ``output_text`` part, which renders as no text.
    """
    kind = item.get("type")
    if kind == "message":
        content = item.get("content")
        parts = [output_part(p) for p in content] if isinstance(content, list) else content
        if parts == [] or parts is None:
            parts = [output_part({"type": "output_text", "text": ""})]
        item = {**item, "content": parts}
    if kind == "reasoning":
        item = reasoning_shape(item)
    if kind in ("message", "function_call") and item.get("status") not in ITEM_STATUSES:
        item = {**item, "status": "completed"}
    return item


def reasoning_shape(item: dict[str, Any]) -> dict[str, Any]:
    """A reasoning item as OpenAI's type requires it: ``summary`` a list (empty when the
    model server sent none), and the optional ``content`` / ``encrypted_content`` left
    out rather than null (OpenAI omits what it has not got; the SDK's type allows
    either, strict clients expect the absence)."""
    if isinstance(item.get("summary"), list) and all(
        item.get(key, ...) is not None for key in ("content", "encrypted_content")
    ):
        return item
    fixed = {k: v for k, v in item.items() if k not in _NULL_OMITTED or v is not None}
    if not isinstance(fixed.get("summary"), list):
        fixed["summary"] = []
    return fixed


_NULL_OMITTED = frozenset({"content", "encrypted_content"})


def streamed_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item as an ``output_item.added`` event shows it (still in progress: its content
    comes in the events that follow)."""
    fixed = dict(item)
    kind = fixed.get("type")
    if kind == "message":
        # OpenAI's added message has its parts still to come: an empty list, never null.
        content = fixed.get("content")
        fixed["content"] = [output_part(p) for p in content] if isinstance(content, list) else []
    if kind == "reasoning":
        fixed = reasoning_shape(fixed)
    if kind in ("message", "function_call") and "status" not in fixed:
        fixed["status"] = "in_progress"
    return fixed


# -- tools and errors ----------------------------------------------------------------------------


def echoed_tools(tools: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The request's tools as the Response object echoes them: a function tool always
    carries ``description``, ``strict`` and ``parameters``, null when the client left
    them out (OpenAI's echo has every key; null says the model server's default applied:
    nothing here makes a schema strict that the client did not)."""
    echoed: list[dict[str, Any]] = []
    for tool in tools or ():
        if tool.get("type") == "function":
            tool = {"description": None, "strict": None, "parameters": None, **tool}
        echoed.append(tool)
    return echoed


def echoed_text(text: dict[str, Any] | None) -> dict[str, Any]:
    """``Response.text``: OpenAI's defaults where the client gave nothing, and a
    ``json_schema`` format with its optional ``description`` and ``strict`` (null when
    left out), as OpenAI echoes it."""
    if not text:
        return {**DEFAULT_TEXT, "format": dict(DEFAULT_TEXT["format"])}
    form = text.get("format")
    if isinstance(form, dict) and form.get("type") == "json_schema":
        return {**text, "format": {"description": None, "strict": None, **form}}
    return text


# Failures that are not the server's own, whose code a client acts on (compact its
# context, tell the operator): a background job's Response carries the same code as the
# foreground's refusal. OpenAI's failed background responses carry such codes too, beyond
# the SDK's listed ones (which the SDK does not enforce).
KEPT_ERROR_CODES = frozenset({"upstream_authentication_failed"})


def response_error(error: ApiError) -> dict[str, Any]:
    """``Response.error``: the refusal's own code when the request (a 4xx) or the gateway's
    upstream credentials were refused, as the same refusal in the foreground says it;
    otherwise OpenAI's ``rate_limit_exceeded`` or ``server_error`` (the details in the
    message, and in the stream's ``error`` event). ``type`` and ``param``: the original
    error's."""
    if error.status_code == 429:
        code = RATE_LIMITED
    elif error.code is not None and (
        400 <= error.status_code < 500 or error.code in KEPT_ERROR_CODES
    ):
        code = error.code
    else:
        code = SERVER_ERROR
    return {
        "code": code,
        "message": error.message,
        "param": error.param,
        "type": error.error_type,
    }


# -- the Response object ---------------------------------------------------------------------------


def open_sampling(request: CreateResponseRequest) -> tuple[str, ...]:
    """Sampling fields the client left to the model server's defaults."""
    return tuple(key for key in DEFAULT_SAMPLING if getattr(request, key) is None)


def base_response(
    request: CreateResponseRequest,
    *,
    response_id: str,
    created_at: int,
    conversation_id: str | None,
) -> dict[str, Any]:
    """The object in state ``in_progress``, before the model has produced anything."""
    extra = request.model_extra or {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": request.background,
        **(
            {"background_options": request.background_options.echoed()}
            if request.background_options
            else {}
        ),
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
        # Known when the turn ends (turns/runner/tokens.py); null until then.
        "prompt_cache_diagnostics": None,
        "prompt_cache_options": (
            request.prompt_cache_options.echoed() if request.prompt_cache_options else None
        ),
        "prompt_cache_retention": extra.get("prompt_cache_retention"),
        # With the effective context mode (the SDK's meaning of it on a response).
        "reasoning": {
            **(request.reasoning or DEFAULT_REASONING),
            "context": request.reasoning_context,
        },
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier or "auto",
        "store": request.store,
        "temperature": (
            DEFAULT_SAMPLING["temperature"] if request.temperature is None else request.temperature
        ),
        "text": echoed_text(request.text),
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": echoed_tools(request.tools),
        "top_logprobs": request.top_logprobs or 0,
        "top_p": DEFAULT_SAMPLING["top_p"] if request.top_p is None else request.top_p,
        "truncation": request.truncation or "disabled",
        "usage": None,
        "user": request.user,
        "presence_penalty": _number(extra.get("presence_penalty"), 0.0),
        "frequency_penalty": _number(extra.get("frequency_penalty"), 0.0),
    }


def _number(value: Any, default: float) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def with_sampling(base: dict[str, Any], upstream: Any, open_keys: Iterable[str]) -> dict[str, Any]:
    """``base`` with the sampling values the model server applied where the client left
    them open (taken from its first snapshot, so every object we show agrees)."""
    if not isinstance(upstream, dict):
        return base
    adopted = {
        key: upstream[key]
        for key in open_keys
        if isinstance(upstream.get(key), int | float) and not isinstance(upstream[key], bool)
    }
    return {**base, **adopted} if adopted else base


def finish_response(
    base: dict[str, Any],
    *,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    completed_at: int | None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"{status!r} is not a terminal status")
    return {
        **base,
        "status": status,
        "output": output,
        "usage": usage,
        "error": error if status == "failed" else None,
        "incomplete_details": incomplete_details if status == "incomplete" else None,
        "completed_at": completed_at if status == "completed" else None,
    }
