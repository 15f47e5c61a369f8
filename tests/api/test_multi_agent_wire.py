"""The hosted multi-agent beta's request surface (issue 37, slice A), through the official
SDK's beta client (``client.beta.responses.create``) on both databases: ``multi_agent`` is
honoured on the beta path with its header and refused everywhere else; what the beta
refuses (``max_tool_calls``, ``reasoning.summary``, explicit compaction, an MCP tool that
needs approval) is a 400 before anything runs or is stored, and a bad ``context_management``
the same 400 as without a tree; the upstream never receives ``multi_agent``."""

from __future__ import annotations

from typing import Any

import pytest
from openai import BadRequestError, OpenAI

from tests.api.test_bad_input import count_responses
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"
BETA = "responses_multi_agent=v1"
BETAS: Any = [BETA]


def refused(server: RunningServer, tenant: TenantKeys, sim: SimServer, call: Any) -> dict[str, Any]:
    """The request is a 400 in OpenAI's error shape, and nothing was sent or stored."""
    before = count_responses(server.db_url, tenant.id)
    with pytest.raises(BadRequestError) as caught:
        call()
    assert sim.requests("/v1/responses") == []
    assert count_responses(server.db_url, tenant.id) == before
    body = caught.value.body
    assert isinstance(body, dict)
    return body


def test_multi_agent_on_the_plain_path_is_refused(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    error = refused(
        server,
        tenant,
        sim,
        lambda: client.responses.create(
            model=MODEL, input="hi", extra_body={"multi_agent": {"enabled": True}}
        ),
    )
    assert error["param"] == "multi_agent"
    assert error["code"] == "unsupported_parameter"
    assert "beta=true" in error["message"]


def test_multi_agent_without_the_beta_header_is_refused(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    error = refused(
        server,
        tenant,
        sim,
        lambda: client.beta.responses.create(
            model=MODEL, input="hi", multi_agent={"enabled": True}
        ),
    )
    assert error["code"] == "beta_header_required"
    assert BETA in error["message"]


def test_other_betas_in_the_header_change_nothing(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    """Codex names betas of its own in OpenAI-Beta: an ordinary turn, as without them."""
    sim.push(Reply("plain"))
    response = client.responses.create(
        model=MODEL, input="hi", extra_headers={"OpenAI-Beta": "responses_websockets=2026-02-06"}
    )
    assert response.status == "completed"


@pytest.mark.parametrize(
    ("multi_agent", "param", "code"),
    [
        (
            {"enabled": True, "max_concurrent_subagents": 0},
            "multi_agent.max_concurrent_subagents",
            None,
        ),
        (
            {"enabled": True, "max_concurrent_subagents": "2"},
            "multi_agent.max_concurrent_subagents",
            None,
        ),
        ({"enabled": "yes"}, "multi_agent.enabled", None),
        ({"max_concurrent_subagents": 2}, "multi_agent.enabled", "missing_required_parameter"),
        ({"enabled": True, "depth": 2}, "multi_agent.depth", None),
        (
            {"enabled": True, "max_concurrent_subagents": 10_000},
            "multi_agent.max_concurrent_subagents",
            "integer_above_max_value",
        ),
    ],
    ids=["zero", "string", "not-bool", "no-enabled", "unknown-key", "above-server-bound"],
)
def test_bad_multi_agent_values_are_refused(
    server: RunningServer,
    tenant: TenantKeys,
    client: OpenAI,
    sim: SimServer,
    multi_agent: Any,
    param: str,
    code: str | None,
) -> None:
    error = refused(
        server,
        tenant,
        sim,
        lambda: client.beta.responses.create(
            model=MODEL, input="hi", multi_agent=multi_agent, betas=BETAS
        ),
    )
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tool_calls": 3}, "max_tool_calls"),
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
        # A tree does not pause for approvals: an MCP tool that needs one for every call
        # (unset means "always") is refused before anything runs, never run unasked.
        (
            {
                "tools": [
                    {"type": "mcp", "server_label": "docs", "server_url": "http://127.0.0.1:9/mcp"}
                ]
            },
            "tools[0].require_approval",
        ),
        (
            {
                "tools": [
                    {
                        "type": "mcp",
                        "server_label": "docs",
                        "server_url": "http://127.0.0.1:9/mcp",
                        "require_approval": "always",
                    }
                ]
            },
            "tools[0].require_approval",
        ),
        (
            {"tools": [{"type": "function", "name": "spawn_agent", "parameters": {}}]},
            "tools[0].name",
        ),
    ],
    ids=["max_tool_calls", "reasoning.summary", "mcp-approval-unset", "mcp-always", "name-clash"],
)
def test_what_the_beta_refuses_is_refused(
    server: RunningServer,
    tenant: TenantKeys,
    client: OpenAI,
    sim: SimServer,
    fields: dict[str, Any],
    param: str,
) -> None:
    error = refused(
        server,
        tenant,
        sim,
        lambda: client.beta.responses.create(
            model=MODEL,
            input="hi",
            multi_agent={"enabled": True},
            betas=BETAS,
            extra_body=fields,
        ),
    )
    assert error["param"] == param
    assert error["code"] in ("unsupported_parameter", "invalid_value")


@pytest.mark.parametrize(
    "context_management",
    [
        "compaction",
        [{"type": "compaction", "compact_threshold": 999}],
        [{"type": "compaction"}],
        [{"type": "summarize", "compact_threshold": 2000}],
        [{"type": "compaction", "compact_threshold": 2000, "keep": 1}],
        [{"type": "compaction", "compact_threshold": 2000}] * 2,
    ],
    ids=["not-a-list", "below-min", "no-threshold", "other-type", "unknown-key", "two"],
)
def test_bad_context_management_is_refused_as_without_a_tree(
    server: RunningServer,
    tenant: TenantKeys,
    client: OpenAI,
    sim: SimServer,
    context_management: Any,
) -> None:
    fields = {"context_management": context_management}
    with_tree = refused(
        server,
        tenant,
        sim,
        lambda: client.beta.responses.create(
            model=MODEL, input="hi", multi_agent={"enabled": True}, betas=BETAS, extra_body=fields
        ),
    )
    without = refused(
        server,
        tenant,
        sim,
        lambda: client.responses.create(model=MODEL, input="hi", extra_body=fields),
    )
    assert with_tree == without
    assert str(with_tree["param"]).startswith("context_management")


def test_explicit_compaction_with_the_beta_is_refused(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    error = refused(
        server,
        tenant,
        sim,
        lambda: client.beta.responses.compact(
            model=MODEL, input="a long history to compact", betas=BETAS
        ),
    )
    assert error["param"] == "previous_response_id"
    assert "context_management" in error["message"]


def test_disabled_multi_agent_is_an_ordinary_turn_and_never_forwarded(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("one answer"))
    response = client.beta.responses.create(
        model=MODEL, input="hi", multi_agent={"enabled": False}, betas=BETAS
    )
    assert response.status == "completed"
    message = response.output[-1]
    assert message.type == "message"
    assert [part.text for part in message.content if part.type == "output_text"] == ["one answer"]
    sent = sim.last("/v1/responses")
    assert "multi_agent" not in sent.json
