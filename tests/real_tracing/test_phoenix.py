"""A turn's trace as a real receiver stored it: our server exports to Arize Phoenix over
OTLP/HTTP, and each turn's spans are read back through Phoenix's REST API: the server span
and its phases as parent and children, the GenAI attributes and the same figures in
OpenInference's keys, our token account, and no prompt, answer or key; and Phoenix's
session view (its GraphQL API) grouping a conversation's turns with their cached tokens."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from openai import OpenAI
from openai.types.responses import Response
from websockets.sync.client import connect

from tests.real_tracing.conftest import PROJECT
from tests.real_tracing.phoenix import Phoenix, StoredSession, StoredSpan
from tests.support.clients import openai_client
from tests.support.mcp_server import McpTestServer
from tests.support.processes import Process
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.typed import cached_tokens, usage_of
from tests.support.websocket import until_terminal
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

pytestmark = pytest.mark.real_tracing

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
HTTP_TURN = "POST /v1/responses"
PLAIN_PHASES = ["chat {model}", "commit", "rehydrate", "render"]


@pytest.fixture(scope="module")
def keys(traced_db: str) -> TenantKeys:
    return create_tenant(traced_db)


@pytest.fixture
def client(traced_server: Process, keys: TenantKeys) -> OpenAI:
    return openai_client(f"{traced_server.url}/v1", keys.api_key, timeout=30)


def server_span(spans: Sequence[StoredSpan], name: str = HTTP_TURN) -> StoredSpan:
    (found,) = [s for s in spans if s.name == name]
    return found


def children(spans: Sequence[StoredSpan], parent: StoredSpan) -> list[str]:
    return sorted(s.name for s in spans if s.parent_id == parent.span_id)


def phases(model: str, names: Sequence[str] = PLAIN_PHASES) -> list[str]:
    return sorted(name.format(model=model) for name in names)


def assert_turn(turn: StoredSpan, response: Response, model: str, finish: str) -> None:
    """The GenAI attributes of a turn's server span, against what the SDK received."""
    usage = usage_of(response)
    seen = turn.attributes
    assert seen["gen_ai.operation.name"] == "chat"
    assert seen["gen_ai.provider.name"] == "vllm"
    assert seen["gen_ai.request.model"] == model
    assert seen["gen_ai.response.id"] == response.id
    assert seen["gen_ai.usage.input_tokens"] == usage.input_tokens
    assert seen["gen_ai.usage.output_tokens"] == usage.output_tokens
    assert seen["gen_ai.usage.cache_read.input_tokens"] == cached_tokens(response)
    assert seen["gen_ai.response.finish_reasons"] == [finish]
    assert seen["agentic.session.id"] and seen["agentic.replica"]
    # What Phoenix's own views read: OpenInference's keys, as we wrote them (a receiver
    # that derives nothing from gen_ai.* reads the same), and Langfuse's session key.
    assert turn.span_kind == "CHAIN"
    assert seen["llm.token_count.prompt"] == usage.input_tokens
    assert seen["llm.token_count.completion"] == usage.output_tokens
    assert seen["llm.token_count.prompt_details.cache_read"] == cached_tokens(response)
    assert seen["session.id"] == seen["langfuse.session.id"] == seen["gen_ai.conversation.id"]


def assert_nothing_private(spans: Sequence[StoredSpan], keys: TenantKeys, *texts: str) -> None:
    stored = json.dumps([s.attributes for s in spans])
    assert keys.api_key not in stored
    for text in texts:
        assert text not in stored


def test_a_continuation_with_cached_tokens_is_one_trace_in_phoenix(
    phoenix: Phoenix, client: OpenAI, keys: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    sim.push(Reply("the first answer"), Reply("the second answer"))
    first = client.responses.create(model=model, input="a long opening story " * 30)
    second = client.responses.create(
        model=model,
        input="go on",
        previous_response_id=first.id,
        extra_headers={"traceparent": TRACEPARENT},
    )
    assert cached_tokens(second) > 0

    spans = phoenix.trace(PROJECT, CLIENT_TRACE, count=5)
    turn = server_span(spans)
    # The server span is the child of the client's span, its phases its own children.
    assert turn.parent_id == CLIENT_SPAN
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}
    assert children(spans, turn) == phases(model)
    assert turn.attributes["http.response.status_code"] == 200
    assert_turn(turn, second, model, "stop")
    account = turn.attributes
    assert account["agentic.token_account.status"] == "exact"
    assert account["agentic.token_account.expected"] == cached_tokens(second)
    assert account["agentic.token_account.measured"] == cached_tokens(second)
    (round_,) = [s for s in spans if s.name == f"chat {model}"]
    assert round_.attributes["gen_ai.usage.input_tokens"] == usage_of(second).input_tokens
    assert round_.span_kind == "LLM"
    assert {s.span_kind for s in spans if s.name in ("commit", "rehydrate", "render")} == {
        "UNKNOWN"
    }
    # The model server was asked under that round's span, in the client's trace.
    sent = sim.requests("/v1/responses")[-1].headers["traceparent"]
    assert sent == f"00-{CLIENT_TRACE}-{round_.span_id}-01"
    assert_nothing_private(spans, keys, "opening story", "go on", "the second answer")

    # The first turn is a trace of its own, found by its response id as an operator would.
    opening = phoenix.trace(PROJECT, phoenix.trace_of_response(PROJECT, first.id), count=5)
    assert server_span(opening).parent_id is None
    assert_turn(server_span(opening), first, model, "stop")


def test_a_streamed_turn_ending_in_a_function_call_is_traced(
    phoenix: Phoenix, client: OpenAI, keys: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    sim.push(ToolCalls([Call("lookup_weather", {"city": "Lyon"}, call_id="call_w")]))
    with client.responses.stream(
        model=model,
        input="what is the weather in Lyon",
        tools=[
            {
                "type": "function",
                "name": "lookup_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": False,
            }
        ],
    ) as events:
        streamed = events.get_final_response()
    assert streamed.output[-1].type == "function_call"

    spans = phoenix.trace(PROJECT, phoenix.trace_of_response(PROJECT, streamed.id), count=5)
    turn = server_span(spans)
    assert children(spans, turn) == phases(model)
    assert_turn(turn, streamed, model, "tool_call")
    assert_nothing_private(spans, keys, "Lyon")


def test_an_mcp_tool_turn_has_a_span_per_tool_call(
    phoenix: Phoenix,
    client: OpenAI,
    keys: TenantKeys,
    sim: SimServer,
    mcp_server: McpTestServer,
) -> None:
    model = sim.config.model
    secret = "sk-mcp-secret-real-tracing-9f8e7d"
    sim.push(ToolCalls([Call("tools__add", {"a": 20, "b": 22}, call_id="c_add")]), Reply("42."))
    final = client.responses.create(
        model=model,
        input="add twenty and twenty-two",
        tools=[
            {
                "type": "mcp",
                "server_label": "tools",
                "server_url": mcp_server.url,
                "require_approval": "never",
                "authorization": secret,
            }
        ],
    )
    assert final.status == "completed"

    spans = phoenix.trace(PROJECT, phoenix.trace_of_response(PROJECT, final.id), count=7)
    turn = server_span(spans)
    assert children(spans, turn) == phases(
        model, ["chat {model}", "chat {model}", "commit", "execute_tool add", "rehydrate", "render"]
    )
    (call,) = [s for s in spans if s.name == "execute_tool add"]
    assert call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert call.span_kind == "TOOL"
    assert call.attributes["gen_ai.tool.name"] == "add"
    assert call.attributes["agentic.mcp.server_label"] == "tools"
    assert_turn(turn, final, model, "stop")
    assert_nothing_private(spans, keys, secret, "twenty-two")


def test_a_websocket_turn_is_traced_like_an_http_one(
    phoenix: Phoenix, traced_server: Process, keys: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    sim.push(Reply("over the socket"))
    with connect(
        traced_server.url.replace("http://", "ws://") + "/v1/responses",
        additional_headers={"authorization": f"Bearer {keys.api_key}"},
        open_timeout=10,
    ) as socket:
        socket.send(json.dumps({"type": "response.create", "model": model, "input": "hello ws"}))
        final = Response.model_validate(until_terminal(socket)[-1]["response"])

    spans = phoenix.trace(PROJECT, phoenix.trace_of_response(PROJECT, final.id), count=5)
    turn = server_span(spans, "response.create /v1/responses")
    assert turn.parent_id is None
    assert turn.attributes["network.protocol.name"] == "websocket"
    assert children(spans, turn) == phases(model)
    assert_turn(turn, final, model, "stop")
    assert_nothing_private(spans, keys, "hello ws", "over the socket")


def test_phoenix_groups_a_conversations_turns_into_one_session_with_their_cached_tokens(
    phoenix: Phoenix, client: OpenAI, keys: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    conversation = client.conversations.create()
    sim.push(Reply("the opening answer"), Reply("the next answer"), Reply("the last answer"))
    turns = [
        client.responses.create(model=model, input=text, conversation=conversation.id)
        for text in ("a long first question " * 30, "a second question", "a third question")
    ]
    assert all(cached_tokens(turn) > 0 for turn in turns[1:])

    found = phoenix.session(conversation.id, traces=len(turns))
    assert isinstance(found, StoredSession), f"no session {conversation.id} in Phoenix"
    assert found.num_traces == len(turns)
    # One trace per turn, in order, each showing its own prompt and cached tokens.
    assert [t.name for t in found.turns] == [HTTP_TURN] * len(turns)
    assert [t.span_kind for t in found.turns] == ["chain"] * len(turns)  # GraphQL enum
    assert [t.prompt_tokens for t in found.turns] == [usage_of(t).input_tokens for t in turns]
    assert [t.cache_read for t in found.turns] == [cached_tokens(t) for t in turns]
    # The session's totals count each model round once (the rounds are its LLM spans).
    assert found.prompt_tokens == sum(usage_of(t).input_tokens for t in turns)
    assert found.completion_tokens == sum(usage_of(t).output_tokens for t in turns)
    for turn, shown in zip(turns, found.turns, strict=True):
        spans = phoenix.trace(PROJECT, shown.trace_id, count=5)
        assert server_span(spans).attributes["gen_ai.response.id"] == turn.id
        assert_turn(server_span(spans), turn, model, "stop")
        assert_nothing_private(spans, keys, "first question", "the last answer")
