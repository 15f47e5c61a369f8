"""The MCP client wrapper, tool conversion, host allow-list, specs and redaction, against
a real MCP server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from agentic_api.errors import InvalidRequest
from agentic_api.mcp.catalog import ToolCatalog, function_name
from agentic_api.mcp.client import (
    REQUEST_TIMEOUT,
    ListedTool,
    McpConnection,
    McpLimits,
    McpListFailed,
    bound_text,
)
from agentic_api.mcp.hosts import HostNotAllowed, check_server_url
from agentic_api.mcp.specs import REDACTED, has_secrets, parse_servers, redact_tools
from agentic_api.mcp.toolbox import McpToolbox, check_hosts
from agentic_api.wire import mcp as wire
from lineage import IdKind, mint_id
from tests.support.mcp_server import McpTestServer, start_mcp_server
from tests.support.servers import free_port

LIMITS = McpLimits(list_timeout=5.0, call_timeout=5.0, max_output_bytes=1000)


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    server = start_mcp_server()
    yield server
    server.stop()


def spec(url: str, **extra: object) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "tools", "server_url": url, **extra}


def one_server(url: str, **extra: object):
    return parse_servers([spec(url, **extra)])[0]


# --- specs ------------------------------------------------------------------------------


def test_specs_parse_headers_authorization_and_filters() -> None:
    server = one_server(
        "http://127.0.0.1:1/mcp",
        headers={"X-Api-Key": "k"},
        authorization="tok",
        allowed_tools=["add", "echo"],
        require_approval={"never": {"tool_names": ["add"]}},
    )
    assert server.headers == {"X-Api-Key": "k", "Authorization": "Bearer tok"}
    assert "tok" not in repr(server) and "'k'" not in repr(server)
    assert server.allows("add", False) and not server.allows("fail", False)
    assert not server.approval.requires_approval("add", False)
    assert server.approval.requires_approval("echo", False)


@pytest.mark.parametrize(
    ("policy", "needs"),
    [
        (None, {"add": True, "lookup": True}),
        ("never", {"add": False, "lookup": False}),
        ("always", {"add": True, "lookup": True}),
        ({"never": {"read_only": True}}, {"add": True, "lookup": False}),
        ({"always": {"tool_names": ["add"]}}, {"add": True, "lookup": False}),
    ],
)
def test_approval_policies(policy: object, needs: dict[str, bool]) -> None:
    server = one_server("http://h/mcp", require_approval=policy)
    for name, expected in needs.items():
        assert server.approval.requires_approval(name, name == "lookup") is expected


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "mcp", "server_url": "http://h/mcp"}, "tools[0].server_label"),
        ({"type": "mcp", "server_label": "a b", "server_url": "http://h"}, "tools[0].server_label"),
        ({"type": "mcp", "server_label": "a"}, "tools[0].server_url"),
        ({"type": "mcp", "server_label": "a", "connector_id": "x"}, "tools[0].connector_id"),
        (spec("http://h", headers={"a": 1}), "tools[0].headers"),
        (spec("http://h", headers={"a": "x\r\ny"}), "tools[0].headers"),
        (spec("http://h", require_approval="sometimes"), "tools[0].require_approval"),
        (spec("http://h", allowed_tools="add"), "tools[0].allowed_tools"),
    ],
)
def test_bad_specs_are_refused_with_their_param(tool: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_servers([tool])
    assert refused.value.param == param
    assert "x\r\ny" not in refused.value.message


def test_duplicate_labels_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="share the server_label"):
        parse_servers([spec("http://a"), spec("http://b")])


def test_redaction_keeps_header_names_and_drops_values() -> None:
    tools = [
        {"type": "function", "name": "f"},
        spec("http://h", headers={"X-Api-Key": "secret-1"}, authorization="secret-2"),
    ]
    redacted = redact_tools(tools)
    assert redacted is not None
    assert redacted[0] == tools[0]
    assert redacted[1]["headers"] == {"X-Api-Key": REDACTED}
    assert redacted[1]["authorization"] == REDACTED
    assert "secret" not in repr(redacted)
    # The original is untouched: the turn still needs the real values.
    assert tools[1]["headers"] == {"X-Api-Key": "secret-1"}
    assert has_secrets(tools) and not has_secrets(redacted[:1])


# --- host allow-list -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "hosts", "loopback", "ok"),
    [
        ("http://127.0.0.1:9/mcp", [], True, True),
        ("http://127.0.0.1:9/mcp", ["127.0.0.1"], False, False),
        ("http://localhost/mcp", ["*"], False, False),
        ("http://[::1]:8/mcp", [], True, True),
        ("https://mcp.example.com/x", ["mcp.example.com"], False, True),
        ("https://mcp.example.com/x", ["*.example.com"], False, True),
        ("https://example.com/x", ["*.example.com"], False, False),
        ("https://evil.com/x", ["mcp.example.com"], False, False),
        ("https://anything.org/x", ["*"], False, True),
        ("http://169.254.169.254/latest", ["*"], False, False),
        ("http://169.254.169.254/latest", ["169.254.169.254"], False, True),
        ("ftp://mcp.example.com/x", ["*"], False, False),
        ("https://user:pw@mcp.example.com/x", ["*"], False, False),
        ("not a url", ["*"], True, False),
    ],
)
def test_host_allow_list(url: str, hosts: list[str], loopback: bool, ok: bool) -> None:
    def check() -> None:
        check_server_url(url, allowed_hosts=hosts, allow_loopback=loopback, param="p")

    if ok:
        check()
    else:
        with pytest.raises(HostNotAllowed) as refused:
            check()
        assert refused.value.status_code == 400
        assert "pw" not in refused.value.message


def test_check_hosts_names_the_tool() -> None:
    servers = parse_servers([{"type": "function", "name": "f"}, spec("http://127.0.0.1/x")])
    with pytest.raises(HostNotAllowed) as refused:
        check_hosts(servers, allowed_hosts=[], allow_loopback=False)
    assert refused.value.param == "tools[1].server_url"


# --- catalog ----------------------------------------------------------------------------


def listed(name: str, read_only: bool = False) -> ListedTool:
    schema = {"type": "object", "properties": {}}
    annotations = {"readOnlyHint": True} if read_only else None
    return ListedTool(name, f"{name} tool", schema, annotations)


def test_catalog_namespaces_filters_and_replaces_in_place() -> None:
    servers = parse_servers(
        [
            {"type": "function", "name": "mine"},
            spec("http://a", allowed_tools={"read_only": True}),
            {"type": "mcp", "server_label": "other", "server_url": "http://b"},
        ]
    )
    catalog = ToolCatalog(
        [
            (servers[0], [listed("add"), listed("lookup", read_only=True)]),
            (servers[1], [listed("a.b/c")]),
        ],
        [{"type": "function", "name": "mine"}],
    )
    request_tools = [
        {"type": "function", "name": "mine"},
        spec("http://a"),
        {"type": "mcp", "server_label": "other", "server_url": "http://b"},
    ]
    names = [t["name"] for t in catalog.upstream_tools(request_tools)]
    assert names == ["mine", "tools__lookup", "other__a_b_c"]
    found = catalog.lookup("tools__lookup")
    assert found is not None and found.tool.name == "lookup"
    assert catalog.lookup("tools__add") is None
    assert catalog.upstream_tools(request_tools) == catalog.upstream_tools(request_tools)
    assert catalog.upstream_tool_choice(
        {"type": "mcp", "server_label": "tools", "name": "lookup"}
    ) == {"type": "function", "name": "tools__lookup"}
    assert catalog.upstream_tool_choice("auto") == "auto"


def test_catalog_refuses_a_name_the_client_uses() -> None:
    servers = parse_servers([spec("http://a")])
    with pytest.raises(InvalidRequest, match="already"):
        ToolCatalog([(servers[0], [listed("add")])], [{"type": "function", "name": "tools__add"}])
    assert function_name("s", "x.y") == "s__x_y"


# --- output bound and wire shapes -------------------------------------------------------


def test_bound_text_cuts_on_a_character_and_says_so() -> None:
    assert bound_text("short", 10) == "short"
    cut = bound_text("é" * 10, 5)
    assert cut.startswith("éé\n[output truncated: 4 of 20 bytes shown]")


def test_derived_ids_link_a_call_to_its_approval() -> None:
    call_id = mint_id(IdKind.FUNCTION_CALL)
    approval = wire.derived_id(call_id, IdKind.MCP_APPROVAL)
    assert approval is not None and approval.startswith("mcpr_")
    assert wire.call_item_id_for(approval) == call_id
    assert wire.derived_id("msg_123", IdKind.MCP_CALL) is None
    assert wire.call_item_id_for(call_id) is None


def test_approval_response_parsing() -> None:
    parsed = wire.parse_approval_response(
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False},
        "input[0]",
    )
    assert parsed == wire.ApprovalResponse("mcpr_1", False, None)
    with pytest.raises(InvalidRequest) as refused:
        wire.parse_approval_response({"approval_request_id": "x", "approve": "yes"}, "input[2]")
    assert refused.value.param == "input[2].approve"


def test_list_tools_events_follow_openai_order() -> None:
    item = wire.list_tools_item("mcpl_1", "tools", [])
    kinds = [e["type"] for e in wire.list_tools_events(3, item)]
    assert kinds == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    failed = wire.list_tools_item("mcpl_1", "tools", [], error="down")
    assert wire.list_tools_events(0, failed)[2]["type"] == "response.mcp_list_tools.failed"


# --- the client against a real MCP server -----------------------------------------------


async def test_list_and_call_against_a_real_server(mcp_server: McpTestServer) -> None:
    server = one_server(mcp_server.url, headers={"X-Api-Key": "sekrit-value"})
    async with McpToolbox([server], LIMITS) as toolbox:
        (listing,) = toolbox.listings
        names = [tool.name for tool in listing[1]]
        assert {"add", "echo", "fail", "slow", "huge", "lookup", "whoami"} <= set(names)
        lookup = next(t for t in listing[1] if t.name == "lookup")
        assert lookup.read_only
        catalog = toolbox.catalog(None)
        add = catalog.lookup("tools__add")
        assert add is not None
        assert add.tool.input_schema["properties"]["a"]["type"] == "number"

        outcome = await toolbox.call(add, '{"a": 2, "b": 40}')
        assert outcome.output == "42.0" and outcome.error is None
        whoami = catalog.lookup("tools__whoami")
        assert whoami is not None
        assert (await toolbox.call(whoami, "{}")).output == "key of length 12"
        assert mcp_server.calls_of("whoami")[-1].headers["x-api-key"] == "sekrit-value"


async def test_parallel_calls_share_one_session(mcp_server: McpTestServer) -> None:
    async with McpToolbox([one_server(mcp_server.url)], LIMITS) as toolbox:
        catalog = toolbox.catalog(None)
        slow, echo = catalog.lookup("tools__slow"), catalog.lookup("tools__echo")
        assert slow is not None and echo is not None
        outcomes = await asyncio.gather(
            toolbox.call(slow, '{"seconds": 0.3}'),
            toolbox.call(slow, '{"seconds": 0.3}'),
            toolbox.call(echo, '{"text": "hi"}'),
        )
    assert [o.output for o in outcomes] == ["slept 0.3", "slept 0.3", "hi"]
    # Concurrent, not one after another.
    assert max(o.seconds for o in outcomes) < 0.55


async def test_failures_become_outcomes(mcp_server: McpTestServer) -> None:
    limits = McpLimits(list_timeout=5.0, call_timeout=0.3, max_output_bytes=100)
    async with McpToolbox([one_server(mcp_server.url)], limits) as toolbox:
        catalog = toolbox.catalog(None)
        fail, slow, huge, add = (
            catalog.lookup(f"tools__{n}") for n in ("fail", "slow", "huge", "add")
        )
        assert fail and slow and huge and add

        failed = await toolbox.call(fail, '{"reason": "because"}')
        assert failed.error is not None
        assert failed.error["type"] == "mcp_tool_execution_error"
        assert "because" in failed.model_text() and failed.model_text().startswith("Error: ")

        timed_out = await toolbox.call(slow, '{"seconds": 3}')
        assert timed_out.error == wire.protocol_error(
            REQUEST_TIMEOUT, "The tool call timed out after 0.3 seconds."
        )
        # The session survives a timed-out call.
        assert (await toolbox.call(add, '{"a": 1, "b": 1}')).output == "2.0"

        big = await toolbox.call(huge, '{"size": 5000}')
        assert big.output is not None
        assert big.output.endswith("[output truncated: 100 of 5000 bytes shown]")

        bad = await toolbox.call(add, "not json")
        assert bad.error is not None and bad.error["type"] == "mcp_protocol_error"

        invalid = await toolbox.call(add, '{"a": "x"}')
        assert invalid.error is not None


async def test_unreachable_server_fails_listing_with_424() -> None:
    server = one_server(f"http://127.0.0.1:{free_port()}/mcp", headers={"X-Api-Key": "s3cr3t"})
    with pytest.raises(McpListFailed) as failed:
        async with McpToolbox([server], LIMITS):
            pass
    assert failed.value.status_code == 424
    assert failed.value.param == "tools[0]"
    assert "s3cr3t" not in failed.value.message


async def test_wrong_path_fails_listing(mcp_server: McpTestServer) -> None:
    connection = McpConnection(one_server(mcp_server.url + "-nope"), LIMITS)
    with pytest.raises(McpListFailed, match="'tools'"):
        await connection.open()
        try:
            await connection.list_tools()
        finally:
            await connection.close()


async def test_a_lost_session_is_reopened_for_the_next_call(mcp_server: McpTestServer) -> None:
    async with McpToolbox([one_server(mcp_server.url)], LIMITS) as toolbox:
        add = toolbox.catalog(None).lookup("tools__add")
        assert add is not None
        connection = toolbox._connections["tools"]
        runner = connection._runner
        assert runner is not None
        # What a transport failure does: the session's task ends on its own.
        connection._closing.set()
        await runner
        assert (await toolbox.call(add, '{"a": 1, "b": 2}')).output == "3.0"
