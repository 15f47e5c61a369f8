"""``vllm_xargs.agentic_context``: vllm-router's program-scheduling hints, ours only."""

from __future__ import annotations

import json
from typing import Any

import orjson

from agentic_api.settings import Settings
from agentic_api.turns.prepare.render import (
    AgenticContext,
    add_agentic_context,
    agentic_context_of,
    render_body,
    upstream_fields,
)
from agentic_api.wire.requests import CreateResponseRequest
from lineage import ResponseLineage, SessionSource

LINEAGE = ResponseLineage(
    session_id="conv_abc",
    continuation_id="resp_2",
    parent_id="resp_1",
    depth=1,
    session_source=SessionSource.CONVERSATION,
)
TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]


def request(**fields: Any) -> CreateResponseRequest:
    return CreateResponseRequest.model_validate({"model": "m", "input": "hi", **fields})


def fields_for(req: CreateResponseRequest, context: AgenticContext | None) -> dict[str, Any]:
    fields = upstream_fields(req, cache_salt="salt")
    add_agentic_context(fields, LINEAGE, req, context)
    # What the upstream receives, parsed back.
    return dict(orjson.loads(render_body(fields, [])))


def test_off_by_default_and_then_absent_from_the_body() -> None:
    settings = Settings(server_secret="s" * 32)
    assert settings.router_agentic_context is False
    assert agentic_context_of(settings) is None
    assert "vllm_xargs" not in fields_for(request(tools=TOOLS), agentic_context_of(settings))


def test_on_it_names_the_session_as_the_program_and_expects_a_resume_with_tools() -> None:
    settings = Settings(
        server_secret="s" * 32, router_agentic_context=True, router_kv_retention_ttl_seconds=45
    )
    body = fields_for(request(tools=TOOLS), agentic_context_of(settings))
    raw = body["vllm_xargs"]["agentic_context"]
    # A JSON string: vLLM refuses objects as vllm_xargs values; the router decodes strings.
    assert isinstance(raw, str)
    assert json.loads(raw) == {
        "program_id": "conv_abc:lead",
        "task_id": "conv_abc",
        "session_id": "conv_abc",
        "agent_id": "lead",
        "expected_resume": True,
        "kv_retention_ttl_seconds": 45.0,
    }


def test_no_tools_or_tool_choice_none_is_not_expected_back_and_keeps_no_ttl() -> None:
    context = AgenticContext(kv_retention_ttl_seconds=45)
    for req in (request(), request(tools=TOOLS, tool_choice="none")):
        decoded = json.loads(fields_for(req, context)["vllm_xargs"]["agentic_context"])
        assert decoded["expected_resume"] is False
        assert "kv_retention_ttl_seconds" not in decoded


def test_the_context_is_the_same_on_every_turn_of_a_session() -> None:
    # A router comparing request heads must not see a per-turn value there.
    later = ResponseLineage("conv_abc", "resp_9", "resp_8", 8, SessionSource.CONVERSATION)
    context = AgenticContext()
    req = request(tools=TOOLS)
    assert context.render(LINEAGE, req) == context.render(later, req)


def test_a_client_cannot_set_it_whether_the_setting_is_on_or_off() -> None:
    forged = json.dumps({"program_id": "someone-else:lead", "expected_resume": True})
    req = request(
        tools=TOOLS, vllm_xargs={"agentic_context": forged, "kv_cache_report_mode": "full"}
    )
    off = fields_for(req, None)
    # The client's other vllm_xargs still travel; its agentic_context does not.
    assert off["vllm_xargs"] == {"kv_cache_report_mode": "full"}
    on = fields_for(req, AgenticContext())
    assert on["vllm_xargs"]["kv_cache_report_mode"] == "full"
    assert json.loads(on["vllm_xargs"]["agentic_context"])["program_id"] == "conv_abc:lead"
    # Alone, the forged key leaves nothing behind (no empty vllm_xargs object).
    only = request(vllm_xargs={"agentic_context": forged})
    assert "vllm_xargs" not in fields_for(only, None)


def test_a_malformed_client_vllm_xargs_goes_as_sent_for_the_model_server_to_refuse() -> None:
    req = request(vllm_xargs="not an object")
    assert fields_for(req, AgenticContext())["vllm_xargs"] == "not an object"
