"""Wire conformance with openai 3.63 (issue 38, items 9-12), through the official SDK:
``safety_identifier`` where the SDK has it and at most 128 characters; every ``include``
value honoured or refused; options that only make sense together refused apart; the
shapes strict clients check (reasoning items, added items, echoed tools and formats);
the deprecated ``prompt`` refused as such. Every refusal is checked to change nothing:
no upstream call, no stored response."""

from __future__ import annotations

import typing
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import ResponseReasoningItem, response_compact_params

from agentic_api.wire.compact import SDK_COMPACT_FIELDS
from agentic_api.wire.create_fields import INCLUDABLE
from agentic_api.wire.reasoning_seal import SEAL_PREFIX
from tests.api.test_bad_input import count_responses
from tests.conftest import RunningServer
from tests.support.sql import scalar
from tests.support.tenants import TenantKeys
from tests.support.typed import unchecked
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"
TOOL: dict[str, Any] = {
    "type": "function",
    "name": "lookup",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
}


def refusal(error: pytest.ExceptionInfo[openai.BadRequestError]) -> dict[str, Any]:
    body = error.value.body
    assert isinstance(body, dict)
    return body


def post(server: RunningServer, tenant: TenantKeys, path: str, body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}{path}",
        json=body,
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    )


def get(server: RunningServer, tenant: TenantKeys, path: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}{path}", headers={"authorization": f"Bearer {tenant.api_key}"}, timeout=20
    )


# -- 9. safety_identifier -----------------------------------------------------------------


def test_conversations_create_takes_a_safety_identifier_and_keeps_it(
    client: OpenAI, server: RunningServer
) -> None:
    raw = client.conversations.with_raw_response.create(safety_identifier="user-hash-7")
    conversation = raw.parse()
    # Stored for the operator; not echoed (OpenAI's Conversation has no such field).
    assert "safety_identifier" not in raw.http_response.json()
    stored = scalar(
        server.db_url,
        "SELECT safety_identifier FROM conversations WHERE id = :id",
        id=conversation.id,
    )
    assert stored == "user-hash-7"


def test_compact_echoes_the_safety_identifier(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("GOAL: test. DONE: nothing."))
    compacted = client.responses.compact(
        model=MODEL, input="summarize me", safety_identifier="user-hash-8"
    )
    assert compacted.safety_identifier == "user-hash-8"


def test_a_128_character_safety_identifier_is_accepted(client: OpenAI) -> None:
    answer = client.responses.create(model=MODEL, input="hi", safety_identifier="s" * 128)
    assert answer.safety_identifier == "s" * 128
    client.conversations.create(safety_identifier="s" * 128)


@pytest.mark.parametrize("route", ["responses", "conversations", "compact"])
def test_a_longer_safety_identifier_is_refused_everywhere(
    route: str, client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    long = "s" * 129
    with pytest.raises(openai.BadRequestError) as refused:
        if route == "responses":
            client.responses.create(model=MODEL, input="hi", safety_identifier=long)
        elif route == "conversations":
            client.conversations.create(safety_identifier=long)
        else:
            client.responses.compact(model=MODEL, input="hi", safety_identifier=long)
    error = refusal(refused)
    assert error["param"] == "safety_identifier"
    assert "128" in error["message"]
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0
    assert (
        scalar(
            server.db_url, "SELECT count(*) FROM conversations WHERE tenant_id = :t", t=tenant.id
        )
        == 0
    )


# -- 10. include, stream_options, text formats, compact fields ----------------------------


def test_the_include_table_covers_exactly_the_sdks_values() -> None:
    from openai.types.responses.response_includable import ResponseIncludable

    assert set(INCLUDABLE) == set(typing.get_args(ResponseIncludable))


@pytest.mark.parametrize(
    "value", sorted(v for v, policy in INCLUDABLE.items() if policy.handling == "refused")
)
def test_include_values_nothing_here_honours_are_refused(
    value: str, client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model=MODEL, input="hi", include=["message.output_text.logprobs", unchecked(value)]
        )
    error = refusal(refused)
    assert (error["code"], error["param"]) == ("unsupported_value", "include[1]")
    assert value in error["message"]
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


def test_an_unknown_include_value_is_refused(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    answer = post(
        server, tenant, "/v1/responses", {"model": MODEL, "input": "hi", "include": ["bogus"]}
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "include[0]")
    assert sim.calls("/v1/responses") == 0


def test_only_the_include_values_the_upstream_acts_on_are_forwarded(
    client: OpenAI, sim: SimServer
) -> None:
    client.responses.create(
        model=MODEL,
        input="hi",
        include=["message.input_image.image_url", "message.output_text.logprobs"],
        top_logprobs=2,
    )
    assert sim.last("/v1/responses").json["include"] == ["message.output_text.logprobs"]
    client.responses.create(model=MODEL, input="hi", include=["reasoning.encrypted_content"])
    assert "include" not in sim.last("/v1/responses").json


def reasoning_of(items: list[Any]) -> ResponseReasoningItem:
    found = [item for item in items if isinstance(item, ResponseReasoningItem)]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("stream", [False, True])
def test_encrypted_reasoning_is_sealed_and_replayed_without_content(
    stream: bool, client: OpenAI, sim: SimServer
) -> None:
    """Codex's round trip with ``store: false``: it asks for encrypted reasoning, then
    sends the item back with ``encrypted_content`` and without its ``content``; the
    model must see the reasoning again."""
    sim.push(Reply("it is in main.py", reasoning="The bug is an off-by-one."), Reply("fixed"))
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "input": "find the bug",
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    if stream:
        with client.responses.stream(**kwargs) as events:
            done_items = [e.item for e in events if e.type == "response.output_item.done"]
            first = events.get_final_response()
        assert (
            reasoning_of(done_items).encrypted_content
            == reasoning_of(first.output).encrypted_content
        )
    else:
        first = client.responses.create(**kwargs)
    reasoning = reasoning_of(first.output)
    assert reasoning.encrypted_content is not None
    assert reasoning.encrypted_content.startswith(SEAL_PREFIX)
    sent_back = {
        "type": "reasoning",
        "id": reasoning.id,
        "summary": [],
        "encrypted_content": reasoning.encrypted_content,
    }
    client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "find the bug"},
            unchecked(sent_back),
            {"role": "user", "content": "fix it"},
        ],
        store=False,
    )
    replayed = sim.last("/v1/responses").json["input"][1]
    assert replayed["content"] == [{"type": "reasoning_text", "text": "The bug is an off-by-one."}]
    assert replayed["encrypted_content"] is None


def test_without_the_include_reasoning_carries_no_encrypted_content(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("answer", reasoning="thinking"))
    answer = client.responses.create(model=MODEL, input="q")
    reasoning = reasoning_of(answer.output)
    assert "encrypted_content" not in reasoning.model_fields_set
    # Asked for on retrieve, the stored object shows it sealed.
    again = client.responses.retrieve(answer.id, include=["reasoning.encrypted_content"])
    sealed = reasoning_of(again.output).encrypted_content
    assert sealed is not None and sealed.startswith(SEAL_PREFIX)


def test_listings_seal_reasoning_when_asked_and_keep_other_blobs(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("answer", reasoning="thinking"))
    conversation = client.conversations.create()
    client.responses.create(model=MODEL, input="q", conversation=conversation.id)
    plain = reasoning_of(list(client.conversations.items.list(conversation.id)))
    assert "encrypted_content" not in plain.model_fields_set
    listed = client.conversations.items.list(
        conversation.id, include=["reasoning.encrypted_content"]
    )
    sealed = reasoning_of(list(listed)).encrypted_content
    assert sealed is not None and sealed.startswith(SEAL_PREFIX)
    one = client.conversations.items.retrieve(
        plain.id, conversation_id=conversation.id, include=["reasoning.encrypted_content"]
    )
    assert isinstance(one, ResponseReasoningItem) and one.encrypted_content == sealed
    # A client's item holding another provider's blob and no content is shown as sent.
    foreign = {
        "type": "reasoning",
        "id": "rs_foreign",
        "summary": [],
        "encrypted_content": "gAAAAB-opaque",
    }
    answer = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": "q"}, unchecked(foreign)]
    )
    inputs = client.responses.input_items.list(answer.id, include=["reasoning.encrypted_content"])
    assert reasoning_of(inputs.data).encrypted_content == "gAAAAB-opaque"


@pytest.mark.parametrize("key", ["include", "include[]"])
def test_reading_routes_refuse_an_unknown_include(
    key: str, client: OpenAI, server: RunningServer, tenant: TenantKeys
) -> None:
    answer = client.responses.create(model=MODEL, input="hi")
    conversation = client.conversations.create(items=[{"role": "user", "content": "x"}])
    for path in (
        f"/v1/responses/{answer.id}",
        f"/v1/responses/{answer.id}/input_items",
        f"/v1/conversations/{conversation.id}/items",
    ):
        refused = get(server, tenant, f"{path}?{key}=bogus")
        assert refused.status_code == 400, (path, refused.text)
        error = refused.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_value", "include[0]"), path
        refused = get(server, tenant, f"{path}?{key}=file_search_call.results")
        assert refused.json()["error"]["code"] == "unsupported_value", path
        assert get(server, tenant, f"{path}?{key}=message.input_image.image_url").status_code == 200


def test_stream_options_without_a_stream_are_refused(
    client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model=MODEL, input="hi", stream_options={"include_obfuscation": False}
        )
    assert refusal(refused)["param"] == "stream_options"
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


@pytest.mark.parametrize(
    ("form", "param"),
    [
        ({"type": "json_schema", "name": "answer"}, "text.format.schema"),
        ({"type": "json_schema", "schema": {"type": "object"}}, "text.format.name"),
        ({"type": "json_schema", "name": "answer", "schema": "object"}, "text.format.schema"),
    ],
)
def test_a_json_schema_format_needs_its_name_and_schema(
    form: dict[str, Any],
    param: str,
    client: OpenAI,
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="hi", text={"format": unchecked(form)})
    assert refusal(refused)["param"] == param
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


def test_the_compact_fields_are_the_sdks() -> None:
    assert set(typing.get_type_hints(response_compact_params.ResponseCompactParams)) == set(
        SDK_COMPACT_FIELDS
    )


@pytest.mark.parametrize("field", ["stream", "conversation", "store", "temperature", "bogus"])
def test_compact_refuses_fields_it_does_not_take(
    field: str, client: OpenAI, sim: SimServer
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.compact(model=MODEL, input="hi", extra_body={field: True})
    error = refusal(refused)
    assert (error["code"], error["param"]) == ("unknown_parameter", field)
    assert sim.calls("/v1/responses") == 0


def test_compact_takes_what_codex_sends(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("GOAL: test."))
    client.responses.compact(
        model=MODEL,
        input="hi",
        extra_body={
            "tools": [TOOL],
            "parallel_tool_calls": True,
            "reasoning": {"effort": "low"},
            "text": {"verbosity": "low"},
        },
    )
    sent = sim.last("/v1/responses").json
    assert sent["tools"] == [TOOL]
    assert sent["reasoning"] == {"effort": "low"}


# -- 11. shapes strict clients check ------------------------------------------------------


def test_added_reasoning_items_have_a_summary_and_no_nulls(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("answer", reasoning="thinking it over"))
    with client.responses.stream(model=MODEL, input="q") as events:
        added = [e.item for e in events if e.type == "response.output_item.added"]
    reasoning = reasoning_of(added)
    assert reasoning.summary == []
    # The simulator, like vLLM 0.32, sends content and encrypted_content as null.
    assert "content" not in reasoning.model_fields_set
    assert "encrypted_content" not in reasoning.model_fields_set
    message = [item for item in added if item.type == "message"]
    assert message and message[0].content == []


def test_a_reasoning_item_sent_without_a_summary_is_listed_with_one(
    client: OpenAI, sim: SimServer
) -> None:
    given = {
        "type": "reasoning",
        "id": "rs_given_1",
        "content": [{"type": "reasoning_text", "text": "earlier thought"}],
    }
    answer = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": "q"}, unchecked(given)]
    )
    assert sim.last("/v1/responses").json["input"][1]["summary"] == []
    listed = client.responses.input_items.list(answer.id, order="asc")
    item = listed.data[1]
    assert isinstance(item, ResponseReasoningItem)
    assert item.summary == []


def test_tools_and_formats_are_echoed_with_description_and_strict(
    client: OpenAI,
) -> None:
    raw = client.responses.with_raw_response.create(
        model=MODEL,
        input="q",
        tools=[unchecked(TOOL)],
        text={"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}},
    )
    body = raw.http_response.json()
    tool = body["tools"][0]
    assert (tool["description"], tool["strict"]) == (None, None)
    form = body["text"]["format"]
    assert (form["description"], form["strict"]) == (None, None)
    # What the client set is echoed as set.
    given = client.responses.create(
        model=MODEL,
        input="q",
        tools=[unchecked({**TOOL, "description": "Looks up.", "strict": True})],
    )
    echoed = given.tools[0]
    assert echoed.type == "function"
    assert (echoed.description, echoed.strict) == ("Looks up.", True)


# -- 12. the deprecated prompt ------------------------------------------------------------


def test_a_saved_prompt_is_refused_as_deprecated(
    client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="hi", prompt={"id": "pmpt_1"})
    error = refusal(refused)
    assert (error["code"], error["param"]) == ("unsupported_parameter", "prompt")
    assert "deprecated" in error["message"]
    assert "2026-11-30" in error["message"]
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0
