"""OpenTelemetry traces of turns, read back from the SDK's in-memory exporter: one trace per
turn under the client's ``traceparent``, the phases as child spans, the GenAI attributes,
``traceparent`` sent on to the model server, and nothing secret or (unless asked) textual."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI
from openai.types.responses import Response
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from websockets.sync.client import connect

from agentic_api import tracing
from tests.api.test_messages_api import prompt_tokens, sdk
from tests.conftest import RunningServer, app_server
from tests.support.mcp_server import McpTestServer, start_mcp_server
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.typed import cached_tokens, usage_of
from tests.support.websocket import until_terminal, ws_url
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
SECRET = "sk-mcp-secret-tracing-5e4d3c2b1a"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.uninstall()


def finished(exporter: InMemorySpanExporter, name: str, count: int = 1) -> list[ReadableSpan]:
    """The finished spans once ``count`` named ``name`` ended (a stream's server span ends
    just after the client read its last event)."""
    deadline = time.monotonic() + 10
    while True:
        found = list(exporter.get_finished_spans())
        if sum(1 for s in found if s.name == name) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def named(found: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def children(found: Sequence[ReadableSpan], parent: ReadableSpan) -> list[str]:
    return sorted(
        s.name for s in found if s.parent is not None and s.parent.span_id == parent.context.span_id
    )


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def every_value(found: Sequence[ReadableSpan]) -> str:
    """Every attribute value, event and resource attribute of the spans, as one text."""
    parts: list[str] = []
    for span in found:
        parts.extend(repr(v) for v in (span.attributes or {}).values())
        parts.extend(repr(e.attributes) for e in span.events)
        parts.append(span.name)
    return "\n".join(parts)


def assert_genai_turn(turn: Mapping[str, Any], response: Response, model: str) -> None:
    """The GenAI attributes of a completed continuation's span, against what the SDK got."""
    usage = usage_of(response)
    assert turn["gen_ai.operation.name"] == "chat"
    assert turn["gen_ai.provider.name"] == "vllm"
    assert turn["gen_ai.request.model"] == model
    assert turn["gen_ai.response.id"] == response.id
    assert turn["gen_ai.usage.input_tokens"] == usage.input_tokens
    assert turn["gen_ai.usage.output_tokens"] == usage.output_tokens
    assert turn["gen_ai.usage.cache_read.input_tokens"] == cached_tokens(response) > 0
    assert turn["gen_ai.response.finish_reasons"] == ("stop",)
    assert_openinference_turn(turn, response, model)


def assert_openinference_turn(turn: Mapping[str, Any], response: Response, model: str) -> None:
    """The same turn in OpenInference's keys (Phoenix) and Langfuse's session key: the
    values the GenAI keys carry, written by us (not derived by a receiver)."""
    usage = usage_of(response)
    written = usage.input_tokens_details.cache_write_tokens
    # The turn is a CHAIN around its rounds, the LLM spans (Phoenix sums LLM spans' tokens).
    assert turn["openinference.span.kind"] == "CHAIN"
    assert turn["langfuse.observation.type"] == "span"
    assert turn["llm.model_name"] == model
    assert turn["llm.system"] == "vllm"
    assert turn["session.id"] == turn["langfuse.session.id"] == turn["gen_ai.conversation.id"]
    assert turn["llm.token_count.prompt"] == usage.input_tokens
    assert turn["llm.token_count.completion"] == usage.output_tokens
    assert turn["llm.token_count.total"] == usage.total_tokens
    assert turn["llm.token_count.prompt_details.cache_read"] == cached_tokens(response)
    assert turn["llm.token_count.prompt_details.cache_write"] == written
    assert turn["gen_ai.usage.cache_creation.input_tokens"] == written
    # Content keys only when the operator opts in.
    assert "input.value" not in turn and "output.value" not in turn


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_a_continuation_is_one_trace_under_the_clients_traceparent(
    spans: InMemorySpanExporter,
    client: OpenAI,
    tenant: TenantKeys,
    sim: SimServer,
    stream: bool,
) -> None:
    model = sim.config.model
    sim.push(Reply("first answer"), Reply("second answer"))
    first = client.responses.create(model=model, input="tell me a long story " * 20)
    finished(spans, "POST /v1/responses")
    spans.clear()
    traced = {"traceparent": TRACEPARENT}
    second: Response
    if stream:
        with client.responses.stream(
            model=model, input="more", previous_response_id=first.id, extra_headers=traced
        ) as events:
            second = events.get_final_response()
    else:
        second = client.responses.create(
            model=model, input="more", previous_response_id=first.id, extra_headers=traced
        )
    found = finished(spans, "POST /v1/responses")

    (server,) = named(found, "POST /v1/responses")
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None and server.parent.span_id == int(CLIENT_SPAN, 16)
    assert {s.context.trace_id for s in found} == {int(CLIENT_TRACE, 16)}
    assert children(found, server) == ["chat " + model, "commit", "rehydrate", "render"]
    usage = usage_of(second)
    turn = attributes(server)
    assert_genai_turn(turn, second, model)
    assert turn["http.response.status_code"] == 200
    assert turn["agentic.session.id"]
    # A chain's thread is its session (a conversation's is the conversation).
    assert turn["gen_ai.conversation.id"] == turn["agentic.session.id"]
    assert turn["agentic.replica"]
    # The continuation's token account: what vLLM should have served, and what it did.
    assert turn["agentic.token_account.status"] == "exact"
    assert turn["agentic.token_account.measured"] == cached_tokens(second)
    assert turn["agentic.token_account.expected"] == cached_tokens(second)
    assert attributes(named(found, "rehydrate")[0])["agentic.history.items"] == 1 + len(
        first.output
    )

    (round_,) = named(found, "chat " + model)
    assert round_.kind is SpanKind.CLIENT
    upstream = attributes(round_)
    assert upstream["gen_ai.request.model"] == model
    assert upstream["gen_ai.usage.input_tokens"] == usage.input_tokens
    assert upstream["llm.token_count.prompt"] == usage.input_tokens
    assert upstream["openinference.span.kind"] == "LLM"
    assert upstream["langfuse.observation.type"] == "generation"
    assert upstream["session.id"] == turn["session.id"]
    # The model server was asked under the round's span, in the client's trace.
    sent = sim.requests("/v1/responses")[-1].headers["traceparent"]
    assert sent == f"00-{CLIENT_TRACE}-{round_.context.span_id:016x}-01"
    # No text of the prompt or the answer, no credential.
    text = every_value(found)
    assert "story" not in text and "more" not in text and "second answer" not in text
    assert tenant.api_key not in text


def test_with_tracing_off_nothing_is_recorded_or_sent(
    client: OpenAI, sim: SimServer, spans: InMemorySpanExporter
) -> None:
    tracing.uninstall()
    sim.push(Reply("untraced"))
    client.responses.create(
        model=sim.config.model, input="hello", extra_headers={"traceparent": TRACEPARENT}
    )
    assert not tracing.enabled()
    assert spans.get_finished_spans() == ()
    # The client's traceparent is not forwarded either: tracing off touches no header.
    assert "traceparent" not in sim.requests("/v1/responses")[-1].headers


def test_content_is_recorded_only_when_the_operator_opts_in(client: OpenAI, sim: SimServer) -> None:
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter), capture_content=True)
    try:
        sim.push(Reply("a captured answer"))
        client.responses.create(
            model=sim.config.model, input="a captured question", instructions="be brief"
        )
        found = finished(exporter, "POST /v1/responses")
    finally:
        tracing.uninstall()
    (round_,) = named(found, "chat " + sim.config.model)
    upstream = attributes(round_)
    assert "a captured question" in upstream["gen_ai.input.messages"]
    assert "be brief" in upstream["gen_ai.system_instructions"]
    assert "a captured answer" in upstream["gen_ai.output.messages"]
    # OpenInference's content keys carry the same text (Phoenix's input and output panes).
    assert upstream["input.value"] == upstream["gen_ai.input.messages"]
    assert upstream["output.value"] == upstream["gen_ai.output.messages"]
    assert upstream["input.mime_type"] == upstream["output.mime_type"] == "application/json"


def test_a_background_turn_traces_its_queue_wait(
    spans: InMemorySpanExporter, client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("later"))
    queued = client.responses.create(
        model=sim.config.model, input="in the background", background=True
    )
    found = finished(spans, "background turn")
    (job,) = named(found, "background turn")
    assert job.kind is SpanKind.CONSUMER
    assert attributes(job)["gen_ai.response.id"] == queued.id
    assert children(found, job) == [
        "background queue wait",
        "chat " + sim.config.model,
        "commit",
        "rehydrate",
        "render",
    ]
    (wait,) = named(found, "background queue wait")
    assert wait.start_time is not None and job.start_time is not None
    assert wait.start_time <= job.start_time


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    server = start_mcp_server()
    yield server
    server.stop()


def test_each_mcp_call_is_a_span_without_its_credentials(
    spans: InMemorySpanExporter,
    fresh_db: str,
    backend: str,
    sim: SimServer,
    mcp_server: McpTestServer,
    tmp_path: Path,
) -> None:
    keys = create_tenant(fresh_db)
    with app_server(backend, fresh_db, sim.url, tmp_path, mcp_allow_loopback=True) as gateway:
        oai = gateway.client(keys, timeout=30)
        sim.push(ToolCalls([Call("tools__add", {"a": 2, "b": 3}, call_id="c1")]), Reply("It is 5."))
        final = oai.responses.create(
            model=sim.config.model,
            input="add 2 and 3",
            tools=[
                {
                    "type": "mcp",
                    "server_label": "tools",
                    "server_url": mcp_server.url,
                    "require_approval": "never",
                    "authorization": SECRET,
                    "headers": {"X-Api-Key": SECRET},
                }
            ],
        )
        found = finished(spans, "POST /v1/responses")
    assert final.status == "completed"
    (server,) = named(found, "POST /v1/responses")
    model = sim.config.model
    assert children(found, server) == [
        "chat " + model,
        "chat " + model,
        "commit",
        "execute_tool add",
        "rehydrate",
        "render",
    ]
    (call,) = named(found, "execute_tool add")
    assert attributes(call) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "openinference.span.kind": "TOOL",
        "tool.name": "add",
        "agentic.mcp.server_label": "tools",
    }
    text = every_value(found)
    assert SECRET not in text and keys.api_key not in text
    assert "add 2 and 3" not in text


def test_each_websocket_response_create_is_a_server_span_like_an_http_turn(
    spans: InMemorySpanExporter, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    sim.push(Reply("first over the socket"), Reply("second over the socket"))
    with connect(
        ws_url(server),
        additional_headers={
            "authorization": f"Bearer {tenant.api_key}",
            "traceparent": TRACEPARENT,
        },
        open_timeout=10,
    ) as socket:
        socket.send(json.dumps({"type": "response.create", "model": model, "input": "story " * 40}))
        first = until_terminal(socket)[-1]["response"]
        socket.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": model,
                    "input": "more",
                    "previous_response_id": first["id"],
                }
            )
        )
        second = Response.model_validate(until_terminal(socket)[-1]["response"])
        # A refused turn is a span too, failed with the error frame's code and status.
        socket.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": model,
                    "input": "x",
                    "previous_response_id": "resp_gone",
                }
            )
        )
        refusal = json.loads(socket.recv(timeout=20))
    assert refusal["type"] == "error"
    found = finished(spans, tracing.SOCKET_TURN_SPAN, count=3)

    turns = sorted(named(found, tracing.SOCKET_TURN_SPAN), key=lambda s: s.start_time or 0)
    assert len(turns) == 3
    # Every turn is its own span under the handshake's traceparent.
    for turn_span in turns:
        assert turn_span.kind is SpanKind.SERVER
        assert turn_span.parent is not None and turn_span.parent.span_id == int(CLIENT_SPAN, 16)
        assert turn_span.context.trace_id == int(CLIENT_TRACE, 16)
        assert attributes(turn_span)["http.route"] == "/v1/responses"
    served, continued, refused = turns
    assert attributes(served)["gen_ai.response.id"] == first["id"]
    assert children(found, continued) == ["chat " + model, "commit", "rehydrate", "render"]
    turn = attributes(continued)
    assert_genai_turn(turn, second, model)
    assert turn["agentic.session.id"]
    assert turn["agentic.token_account.status"] == "exact"
    assert turn["agentic.token_account.measured"] == cached_tokens(second)
    assert continued.status.status_code is StatusCode.UNSET
    assert attributes(refused)["error.type"] == "previous_response_not_found"
    assert attributes(refused)["http.response.status_code"] == 404
    assert refused.status.status_code is StatusCode.ERROR
    (round_,) = [
        s
        for s in named(found, "chat " + model)
        if s.parent and s.parent.span_id == continued.context.span_id
    ]
    sent = sim.requests("/v1/responses")[-1].headers["traceparent"]
    assert sent == f"00-{CLIENT_TRACE}-{round_.context.span_id:016x}-01"
    text = every_value(found)
    assert "story" not in text and "second over the socket" not in text
    assert tenant.api_key not in text


def test_with_tracing_off_a_websocket_turn_sends_no_traceparent(
    spans: InMemorySpanExporter, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    tracing.uninstall()
    sim.push(Reply("untraced"))
    with connect(
        ws_url(server),
        additional_headers={
            "authorization": f"Bearer {tenant.api_key}",
            "traceparent": TRACEPARENT,
        },
        open_timeout=10,
    ) as socket:
        socket.send(
            json.dumps({"type": "response.create", "model": sim.config.model, "input": "hi"})
        )
        assert until_terminal(socket)[-1]["type"] == "response.completed"
    assert spans.get_finished_spans() == ()
    assert "traceparent" not in sim.requests("/v1/responses")[-1].headers


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_a_messages_turn_is_one_llm_span_with_its_session_and_cache_figures(
    spans: InMemorySpanExporter,
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
    stream: bool,
) -> None:
    model = sim.config.model
    sim.push(Reply("the first reply"), Reply("the second reply"))
    opening: Any = [{"role": "user", "content": "a long question about caches " * 20}]
    message: Any
    with sdk(server, tenant) as claude:
        claude.messages.create(model=model, max_tokens=32, messages=opening)
        finished(spans, "POST /v1/messages")
        spans.clear()
        again: Any = [
            *opening,
            {"role": "assistant", "content": "the first reply"},
            {"role": "user", "content": "and then?"},
        ]
        if stream:
            with claude.messages.stream(model=model, max_tokens=32, messages=again) as events:
                message = events.get_final_message()
        else:
            message = claude.messages.create(model=model, max_tokens=32, messages=again)
    found = finished(spans, "POST /v1/messages")
    (turn_span,) = named(found, "POST /v1/messages")
    turn = attributes(turn_span)
    usage = message.usage
    cached = usage.cache_read_input_tokens or 0
    assert cached > 0
    session = sim.last("/v1/messages").headers["x-session-id"]
    # One model call: the request span is the LLM span (a Langfuse generation).
    assert turn["openinference.span.kind"] == "LLM"
    assert turn["langfuse.observation.type"] == "generation"
    assert turn["session.id"] == turn["langfuse.session.id"] == session
    assert turn["gen_ai.conversation.id"] == session
    assert turn["gen_ai.response.id"] == message.id
    # Anthropic splits the prompt; both vocabularies carry the whole of it.
    assert turn["gen_ai.usage.input_tokens"] == prompt_tokens(usage)
    assert turn["llm.token_count.prompt"] == prompt_tokens(usage)
    assert turn["gen_ai.usage.output_tokens"] == turn["llm.token_count.completion"]
    assert turn["llm.token_count.completion"] == usage.output_tokens
    assert turn["gen_ai.usage.cache_read.input_tokens"] == cached
    assert turn["llm.token_count.prompt_details.cache_read"] == cached
    written = usage.cache_creation_input_tokens or 0
    assert turn["gen_ai.usage.cache_creation.input_tokens"] == written
    assert turn["llm.token_count.prompt_details.cache_write"] == written
    assert turn["gen_ai.response.finish_reasons"] == ("stop",)
    text = every_value(found)
    assert "caches" not in text and "second reply" not in text
    assert tenant.api_key not in text
