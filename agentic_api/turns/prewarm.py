"""``prompt_cache_options.prewarm: true``: the turn's prompt prefilled upstream, nothing
generated for the client, nothing stored.

The request is the real turn's (``turns/prepare/prewarm_request.py``: same rendered
prompt, salt, session fields and headers, one output token, one JSON answer), sent
through the same upstream client, so the router places it where the real turn will go
and vLLM caches its prompt's full blocks there. What the model generated is discarded.

A prewarm leaves no trace in storage (no response row, no items, no conversation change,
no Idempotency-Key outcome), so it has no failed response to store either: every failure,
before or after the upstream call, is a plain error (HTTP status, or a WebSocket error
frame). Its answer is a Response object in OpenAI's shape: ``completed``, no output, the
usage vLLM reported for the prompt (``input_tokens``, ``cached_tokens``) and
``output_tokens`` 0, since nothing it generated is anyone's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanKind

from agentic_api import tracing
from agentic_api.errors import InvalidRequest, UpstreamError
from agentic_api.runtime import Runtime
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.runner.relay import StreamRelay
from agentic_api.turns.runner.round import invalid_answer
from agentic_api.wire.events import CREATED, snapshot_event, terminal_event
from agentic_api.wire.response_object import finish_response, normalize_usage, usage_block
from agentic_api.wire.upstream_answer import final_problem


@dataclass(frozen=True)
class Prewarmed:
    """A prewarm's answer: the Response object, and the events a stream sends for it."""

    response: dict[str, Any]
    events: list[dict[str, Any]]


def check_prewarmable(turn: PreparedTurn) -> None:
    """Turns whose first model call is not the request's own body cannot be warmed by
    sending that body: refused before the upstream call."""
    if turn.runs_tools:
        # The tool loop presents MCP tools as functions and answers approvals first, so
        # its first round's prompt is not the one rendered here.
        raise InvalidRequest(
            "A prewarm warms the prompt as sent; with MCP tools or approval answers the "
            "gateway changes the prompt before the model sees it. Prewarm without them.",
            param="prompt_cache_options.prewarm",
            code="invalid_value",
        )
    if turn.compacts:
        raise InvalidRequest(
            "A compacting turn's prompt is a summary request; it cannot be prewarmed.",
            param="prompt_cache_options.prewarm",
            code="invalid_value",
        )


async def run_prewarm(services: Runtime, turn: PreparedTurn) -> Prewarmed:
    """Sends the prewarm (``turn`` prepared from a request with ``prewarm: true``) and
    returns its answer. Raises ``ApiError`` for any failure (nothing is stored)."""
    check_prewarmable(turn)
    model = turn.request.model
    with tracing.span(f"chat {model}", kind=SpanKind.CLIENT) as traced:
        tracing.record_request(traced, model, turn.request.conversation_id)
        tracing.record_input(traced, turn.body)
        answer = await services.upstream.create_response(
            turn.body, tracing.with_traceparent(turn.headers)
        )
        tracing.record_response(traced, answer)
    problem = final_problem(answer)
    if problem is not None:
        raise invalid_answer(problem)
    if answer.get("status") == "failed":
        error = answer.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else None
        raise UpstreamError(f"The model failed: {message or 'no reason given'}")
    final = finish_response(
        turn.base,
        # The one token vLLM generated ends it "incomplete" (max_output_tokens); the
        # prewarm itself, which asked for no output, is complete.
        status="completed",
        output=[],
        usage=prompt_usage(answer.get("usage")),
        completed_at=int(time.time()),
    )
    relay = StreamRelay(turn.base)
    created = relay.stamp(snapshot_event(CREATED, dict(turn.base)))
    completed = relay.stamp(terminal_event(final))
    return Prewarmed(final, [created, completed])


def prompt_usage(raw: Any) -> dict[str, Any]:
    """The usage of the prompt alone: vLLM's input and cached tokens (and what it wrote
    to its cache), no output tokens (the one generated is discarded)."""
    usage = normalize_usage(raw)
    details = usage["input_tokens_details"]
    return usage_block(
        input_tokens=usage["input_tokens"],
        cached_tokens=details["cached_tokens"],
        cache_write_tokens=details["cache_write_tokens"],
    )
