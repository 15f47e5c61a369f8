"""OpenTelemetry traces of turns, opt-in with the standard ``OTEL_*`` environment.

``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) turns tracing
on: spans go over OTLP/HTTP protobuf through the official SDK and exporter, which read the
rest of ``OTEL_*`` themselves (headers, timeouts, ``OTEL_SERVICE_NAME``, resource
attributes). With neither set no tracer provider exists, ``span`` hands back one shared
do-nothing context and no header is touched: a turn pays a few attribute reads (about
4 µs, docs/benchmarks/tracing).

One trace per turn: a server span (``ServerSpans`` for an HTTP POST, ``socket_turn`` for each
WebSocket ``response.create``; from the client's ``traceparent`` when it sends one; a
background job's own span when it runs), with child spans for each phase
(rehydration, render, every upstream round, every MCP tool call, the commit, the queue
wait). Upstream rounds carry ``traceparent`` out, so a vLLM with tracing on joins the trace.
Every figure is written in two vocabularies with the same values, because the receivers
people run read different ones: the GenAI semantic conventions (``gen_ai.*``: Langfuse,
Datadog, Grafana) and OpenInference (``session.id``, ``llm.token_count.*``,
``openinference.span.kind``: Arize Phoenix's session view and cache columns); the session
also as ``langfuse.session.id``, the key Langfuse groups a session by. Our own figures are
``agentic.*``. No prompt or output text is recorded unless the operator sets
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; headers, keys and MCP
credentials never are.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import orjson
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
PROVIDER = "vllm"
# OpenInference's span kind (LLM, TOOL, ...), the key Phoenix files a span's role under.
OPENINFERENCE_KIND = "openinference.span.kind"
LLM_KIND = "LLM"
# A turn's own span is a CHAIN around its model rounds (the LLM spans): Phoenix's session
# view sums the tokens of LLM spans, and the turn's figures are its rounds' sum, so marking
# both LLM would count every token twice. Without our key Phoenix infers LLM from
# ``gen_ai.operation.name: chat``.
TURN_KIND = "CHAIN"
JSON_MIME = "application/json"
SERVICE_NAME = "agentic-api"
# The POST routes a turn runs under: other requests (reads, health, metrics) get no span.
TURN_PATHS = frozenset(
    {"/v1/responses", "/v1/responses/compact", "/v1/responses/input_tokens", "/v1/messages"}
)

# A WebSocket turn's server span (no HTTP method: one connection carries many turns).
SOCKET_TURN_SPAN = "response.create /v1/responses"

# The gateway replica (its host), as the background workers name theirs.
_REPLICA = socket.gethostname()
_NO_SPAN: AbstractContextManager[Span] = contextlib.nullcontext(INVALID_SPAN)


class _State:
    """What is installed: the tracer (None while tracing is off) and the content switch."""

    tracer: Tracer | None = None
    provider: TracerProvider | None = None
    capture_content: bool = False


_state = _State()


def configure_from_environment(environ: Mapping[str, str] = os.environ) -> bool:
    """Installs OTLP/HTTP export when the environment names an endpoint; True if it did."""
    if not (
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    # Imported only when asked for: a server without tracing never loads the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    install(
        BatchSpanProcessor(OTLPSpanExporter()),
        capture_content=environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() == "true",
    )
    return True


def install(processor: SpanProcessor, *, capture_content: bool = False) -> TracerProvider:
    """Sends this process's spans to ``processor`` (the exporter's, or a test's)."""
    uninstall()
    # Resource.create adds OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over our default.
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(processor)
    _state.provider = provider
    _state.tracer = provider.get_tracer("agentic_api")
    _state.capture_content = capture_content
    return provider


def uninstall() -> None:
    """Flushes and stops what ``install`` started (at shutdown); tracing is off after."""
    provider = _state.provider
    _state.tracer, _state.provider, _state.capture_content = None, None, False
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _state.tracer is not None


def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    start_time: int | None = None,
) -> AbstractContextManager[Span]:
    """A child of the current span, current while the block runs (records an exception
    that leaves it); with tracing off, one shared context that does nothing."""
    tracer = _state.tracer
    if tracer is None:
        return _NO_SPAN
    return tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=None if attributes is None else _clean(attributes),
        start_time=start_time,
    )


def current() -> Span:
    """The span a phase adds its attributes to (a non-recording one with tracing off)."""
    return trace.get_current_span() if _state.tracer is not None else INVALID_SPAN


def with_traceparent(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` plus the current span's W3C ``traceparent`` (to the model server)."""
    if _state.tracer is None:
        return headers
    carried = dict(headers)
    propagate.inject(carried)
    return carried


def queue_wait(enqueued_at_ns: int) -> None:
    """A span from a background job's enqueueing to now, under the current span."""
    with span("background queue wait", start_time=enqueued_at_ns):
        pass


def record_request(
    target: Span, model: str, conversation_id: str | None, *, kind: str = LLM_KIND
) -> None:
    """The attributes known before the model runs. ``conversation_id``: the conversation,
    or for a ``previous_response_id`` chain its session (the thread the semantic
    conventions mean, which Phoenix and Langfuse group a session's turns by). ``kind``:
    OpenInference's, ``TURN_KIND`` for the span of a whole turn (see ``TURN_KIND``)."""
    if not target.is_recording():
        return
    target.set_attributes(
        _clean(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.request.model": model,
                "gen_ai.conversation.id": conversation_id,
                OPENINFERENCE_KIND: kind,
                "llm.system": PROVIDER,
                "llm.model_name": model,
                "session.id": conversation_id,
                "langfuse.session.id": conversation_id,
                # Langfuse's own key wins over what it infers from gen_ai.request.model
                # (a generation): the turn is a span around its rounds' generations.
                "langfuse.observation.type": "span" if kind == TURN_KIND else "generation",
            }
        )
    )


def tool_call_attributes(name: str, server_label: str) -> dict[str, AttributeValue]:
    """An MCP tool call's span attributes: its name and server, never its arguments."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        OPENINFERENCE_KIND: "TOOL",
        "tool.name": name,
        "agentic.mcp.server_label": server_label,
    }


def record_response(target: Span, response: Mapping[str, Any] | None) -> None:
    """The GenAI attributes of a Responses object (ours or the upstream's): id, model,
    usage with cache reads, finish reasons; its output text only when captured."""
    if response is None or not target.is_recording():
        return
    usage = response.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    record_usage(
        target,
        response_id=response.get("id"),
        model=response.get("model"),
        prompt=usage.get("input_tokens"),
        completion=usage.get("output_tokens"),
        cached=details.get("cached_tokens"),
        written=details.get("cache_write_tokens"),
        reasons=finish_reasons(response),
    )
    if _state.capture_content:
        output = _json(response.get("output"))
        target.set_attributes(
            _clean(
                {
                    "gen_ai.output.messages": output,
                    "output.value": output,
                    "output.mime_type": JSON_MIME if output is not None else None,
                }
            )
        )


def record_usage(
    target: Span,
    *,
    response_id: str | None,
    model: str | None,
    prompt: int | None,
    completion: int | None,
    cached: int | None,
    written: int | None,
    reasons: Sequence[str],
) -> None:
    """An answer's id, model, token counts and finish reasons, in both vocabularies.
    ``prompt``: the whole prompt (cached and written tokens are parts of it)."""
    if not target.is_recording():
        return
    total = None if prompt is None or completion is None else prompt + completion
    target.set_attributes(
        _clean(
            {
                "gen_ai.response.id": response_id,
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": prompt,
                "gen_ai.usage.output_tokens": completion,
                "gen_ai.usage.cache_read.input_tokens": cached,
                "gen_ai.usage.cache_creation.input_tokens": written,
                "gen_ai.response.finish_reasons": list(reasons) or None,
                "llm.token_count.prompt": prompt,
                "llm.token_count.completion": completion,
                "llm.token_count.total": total,
                "llm.token_count.prompt_details.cache_read": cached,
                "llm.token_count.prompt_details.cache_write": written,
            }
        )
    )


def record_input(target: Span, body: bytes) -> None:
    """The upstream request's input and instructions, only when content is captured."""
    if not (_state.capture_content and target.is_recording()):
        return
    request = orjson.loads(body)
    messages = _json(request.get("input"))
    target.set_attributes(
        _clean(
            {
                "gen_ai.input.messages": messages,
                "gen_ai.system_instructions": _json(request.get("instructions")),
                "input.value": messages,
                "input.mime_type": JSON_MIME if messages is not None else None,
            }
        )
    )


def record_turn(target: Span, *, session_id: str | None) -> None:
    """Our own attributes of the turn: its session (the KV-cache tag) and the gateway
    replica (host) serving it."""
    if target.is_recording():
        target.set_attributes(
            _clean({"agentic.session.id": session_id, "agentic.replica": _REPLICA})
        )


def record_token_account(
    target: Span,
    *,
    status: str,
    reusable: int | None,
    expected: int | None,
    measured: int | None,
    lost: Mapping[str, int],
) -> None:
    """The turn's token-reuse account (``cache/accounting.py``): expected against measured
    cached tokens, and the parent tokens lost, one attribute per cause."""
    if not target.is_recording():
        return
    attributes: dict[str, Any] = {
        "agentic.token_account.status": status,
        "agentic.token_account.reusable": reusable,
        "agentic.token_account.expected": expected,
        "agentic.token_account.measured": measured,
    }
    for cause, tokens in lost.items():
        attributes[f"agentic.token_account.lost.{cause}"] = tokens
    target.set_attributes(_clean(attributes))


def finish_reasons(response: Mapping[str, Any]) -> list[str]:
    """The semconv's finish reasons for a Responses object: ``tool_call`` when it ends in
    calls for the client, ``length``/``content_filter`` when incomplete, else its status."""
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return ["length" if reason == "max_output_tokens" else str(reason or "incomplete")]
    output = response.get("output")
    if status == "completed" and isinstance(output, Sequence) and output:
        last = output[-1]
        if isinstance(last, Mapping) and last.get("type") == "function_call":
            return ["tool_call"]
        return ["stop"]
    return [str(status)] if status else []


class ServerSpans:
    """ASGI middleware: a SERVER span around each turn's POST, a child of the client's
    ``traceparent`` when it sends one. Only the method, path and status are recorded."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        tracer = _state.tracer
        if (
            tracer is None
            or scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] not in TURN_PATHS
        ):
            await self.app(scope, receive, send)
            return
        carrier = client_carrier(scope["headers"])
        path = scope["path"]
        with tracer.start_as_current_span(
            f"POST {path}",
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "http.route": path},
        ) as server:

            async def send_noting_status(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    server.set_attribute("http.response.status_code", message["status"])
                await send(message)

            await self.app(scope, receive, send_noting_status)


def client_carrier(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The W3C trace context a client sent in ``headers`` (an ASGI scope's); empty with
    tracing off, so that a connection keeps nothing of it."""
    if _state.tracer is None:
        return {}
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name in (b"traceparent", b"tracestate")
    }


@contextlib.contextmanager
def socket_turn(carrier: Mapping[str, str]) -> Iterator[Span]:
    """The SERVER span of one WebSocket ``response.create``: what ``ServerSpans`` is to an
    HTTP turn, under the ``traceparent`` of the connection's handshake when it sent one
    (a frame carries no headers). A refusal sets the span's status and ``error.type`` to
    the error's code, never its message (it may quote the request)."""
    tracer = _state.tracer
    if tracer is None:
        yield INVALID_SPAN
        return
    with tracer.start_as_current_span(
        SOCKET_TURN_SPAN,
        context=propagate.extract(carrier),
        kind=SpanKind.SERVER,
        attributes={"http.route": "/v1/responses", "network.protocol.name": "websocket"},
        record_exception=False,
        set_status_on_exception=False,
    ) as server:
        try:
            yield server
        except BaseException as exc:
            # An API error's code and status (the error frame's), else the exception's class.
            server.set_attributes(
                _clean(
                    {
                        "error.type": getattr(exc, "code", None) or type(exc).__name__,
                        "http.response.status_code": getattr(exc, "status_code", None),
                    }
                )
            )
            server.set_status(Status(StatusCode.ERROR))
            raise


def _clean(attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    # OpenTelemetry refuses None values (with a warning): an unknown figure is left out.
    return {name: value for name, value in attributes.items() if value is not None}


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()
