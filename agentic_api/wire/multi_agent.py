"""The hosted multi-agent beta on the wire: what a request may ask, what is refused.

OpenAI serves it at ``POST /v1/responses?beta=true`` with the header
``OpenAI-Beta: responses_multi_agent=v1`` (``client.beta.responses.create(...,
betas=["responses_multi_agent=v1"])`` sends both); its one request field is
``multi_agent {enabled, max_concurrent_subagents}``. Here:

- ``multi_agent`` anywhere else (the plain path, the beta path without the header) is a
  400 naming it, never a field passed on and ignored;
- other betas named in the header (Codex sends its own) change nothing and are not
  refused;
- what the beta itself refuses with multi-agent on (``max_tool_calls``,
  ``reasoning.summary``) is a 400 before anything runs, and so is an MCP tool that needs
  approval for every call (a tree does not pause for approvals);
- ``max_concurrent_subagents`` is bounded by the server (``AGENTIC_MULTI_AGENT_MAX_CONCURRENT``).

The items a multi-agent response shows (``multi_agent_call``, ``multi_agent_call_output``,
``agent_message``, the ``agent`` attribution on every item) are built by the functions at
the end of this module, with the SDK's beta types (``openai/types/beta``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentic_api.errors import InvalidRequest
from agentic_api.wire.limits import MAX_INTEGER
from lineage import IdKind, mint_id

# The one beta this server serves, as the SDK names it in ``OpenAI-Beta``.
MULTI_AGENT_BETA = "responses_multi_agent=v1"

# OpenAI's default (``response_create_params.MultiAgent``).
DEFAULT_MAX_CONCURRENT_SUBAGENTS = 3

# The root agent's canonical name, as the Agents SDK's hosted model expects it.
ROOT_AGENT = "/root"

Action = Literal[
    "spawn_agent", "wait_agent", "send_message", "followup_task", "interrupt_agent", "list_agents"
]
ACTIONS: tuple[Action, ...] = (
    "spawn_agent",
    "wait_agent",
    "send_message",
    "followup_task",
    "interrupt_agent",
    "list_agents",
)


class MultiAgentConfig(BaseModel):
    """``multi_agent`` as the SDK types it; unknown keys are refused (never ignored)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(strict=True)
    max_concurrent_subagents: int = Field(
        DEFAULT_MAX_CONCURRENT_SUBAGENTS, ge=1, le=MAX_INTEGER, strict=True
    )


@dataclass(frozen=True)
class BetaContext:
    """How the request arrived: on the beta path (``?beta=true``) and with which
    ``OpenAI-Beta`` header (None when absent)."""

    path: bool = False
    header: str | None = None

    @property
    def betas(self) -> frozenset[str]:
        if self.header is None:
            return frozenset()
        return frozenset(part.strip() for part in self.header.split(",") if part.strip())


NOT_BETA = BetaContext()


def beta_of(query: Mapping[str, str], headers: Mapping[str, str]) -> BetaContext:
    """The request's beta context from its query string and headers."""
    return BetaContext(path=query.get("beta") == "true", header=headers.get("openai-beta"))


def socket_beta(headers: Mapping[str, str]) -> BetaContext:
    """A Responses WebSocket's beta context: the beta WebSocket
    (``client.beta.responses.connect``) is the same path, told apart by its header."""
    header = headers.get("openai-beta")
    beta = BetaContext(header=header)
    return BetaContext(path=MULTI_AGENT_BETA in beta.betas, header=header)


def inject_failed(
    response_id: str,
    code: Literal["response_already_completed", "response_not_found"],
    input_items: list[Any],
) -> dict[str, Any]:
    """``response.inject.failed`` for a response that is not running on the connection
    (its input comes back, uncommitted, so the client can send it elsewhere)."""
    message = {
        "response_already_completed": "The response has already ended; continue it with "
        "previous_response_id and these items as input.",
        "response_not_found": "No response with this id is running on this connection.",
    }[code]
    return {
        "type": "response.inject.failed",
        "response_id": response_id,
        "input": input_items,
        "error": {"code": code, "message": message},
        # Not part of any response's stream: the response is not running.
        "sequence_number": 0,
    }


def check_multi_agent(
    config: MultiAgentConfig | None,
    data: Mapping[str, Any],
    beta: BetaContext,
) -> None:
    """Everything about ``multi_agent`` that could refuse the request, before it runs.
    Other betas a client names in ``OpenAI-Beta`` (Codex sends its own, such as
    ``responses_websockets=…``) opt into features of other servers: they change nothing
    here, so they are not refused."""
    if config is None:
        return
    if not beta.path:
        raise InvalidRequest(
            "Unsupported parameter: 'multi_agent' is a beta field: send it to "
            "POST /v1/responses?beta=true with the header "
            f"'OpenAI-Beta: {MULTI_AGENT_BETA}' (client.beta.responses.create).",
            param="multi_agent",
            code="unsupported_parameter",
        )
    if MULTI_AGENT_BETA not in beta.betas:
        raise InvalidRequest(
            f"'multi_agent' requires the header 'OpenAI-Beta: {MULTI_AGENT_BETA}' "
            f"(betas=['{MULTI_AGENT_BETA}'] in the SDK).",
            param="multi_agent",
            code="beta_header_required",
        )
    if not config.enabled:
        return
    if data.get("max_tool_calls") is not None:
        raise InvalidRequest(
            "'max_tool_calls' is not supported with multi_agent enabled.",
            param="max_tool_calls",
            code="unsupported_parameter",
        )
    reasoning = data.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("summary") is not None:
        raise InvalidRequest(
            "'reasoning.summary' is not supported with multi_agent enabled.",
            param="reasoning.summary",
            code="unsupported_parameter",
        )
    tools = data.get("tools") or ()
    for index, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") == "mcp" and tool.get("require_approval", "always") in (
            None,
            "always",
        ):
            # A tree does not pause for approvals: a tool that needs one for every call is
            # refused now, before anything is queued or run (a filter that leaves some
            # tool needing it is refused once the server is listed, still before the
            # model runs: turns/kinds/multi_agent/gateway.py).
            raise InvalidRequest(
                "An MCP tool that needs approval cannot be used with multi_agent on this "
                "server (its agents do not pause for approvals); set require_approval to "
                "'never' (unset means 'always').",
                param=f"tools[{index}].require_approval",
                code="unsupported_parameter",
            )
        if tool.get("type") == "function" and tool.get("name") in ACTIONS:
            raise InvalidRequest(
                f"The function tool '{tool['name']}' has the name of a multi-agent action; "
                "rename it.",
                param=f"tools[{index}].name",
                code="invalid_value",
            )


def check_concurrency(config: MultiAgentConfig | None, max_concurrent: int) -> None:
    """The server's bound on ``max_concurrent_subagents`` (a setting, so checked where
    the settings are: before the turn is prepared or queued)."""
    if config is None or not config.enabled:
        return
    if config.max_concurrent_subagents > max_concurrent:
        raise InvalidRequest(
            f"'multi_agent.max_concurrent_subagents' may be at most {max_concurrent} on this "
            f"server; got {config.max_concurrent_subagents}.",
            param="multi_agent.max_concurrent_subagents",
            code="integer_above_max_value",
        )


def refuse_compaction_beta(beta: BetaContext) -> None:
    """``/responses/compact`` with the multi-agent beta: the beta compacts automatically
    (``context_management``), never on request."""
    if MULTI_AGENT_BETA in beta.betas:
        raise InvalidRequest(
            "Explicit compaction is not supported for multi-agent responses; use "
            "'context_management' on the multi-agent request instead.",
            param="previous_response_id",
            code="unsupported_parameter",
        )


# -- the items a multi-agent response shows (openai/types/beta/beta_response_output_item.py)


def attributed(item: Mapping[str, Any], agent_name: str) -> dict[str, Any]:
    """``item`` as the client sees it in a multi-agent response: with the agent that
    produced it."""
    return {**item, "agent": {"agent_name": agent_name}}


def call_item(action: str, arguments: str, call_id: str, agent_name: str) -> dict[str, Any]:
    """``multi_agent_call``: an action an agent asked of the tree."""
    return attributed(
        {
            "id": mint_id(IdKind.MULTI_AGENT_CALL),
            "type": "multi_agent_call",
            "action": action,
            "arguments": arguments,
            "call_id": call_id,
        },
        agent_name,
    )


def call_output_item(action: str, call_id: str, text: str, agent_name: str) -> dict[str, Any]:
    """``multi_agent_call_output``: what the action returned to the agent that asked."""
    return attributed(
        {
            "id": mint_id(IdKind.MULTI_AGENT_OUTPUT),
            "type": "multi_agent_call_output",
            "action": action,
            "call_id": call_id,
            "output": [{"type": "output_text", "text": text, "annotations": []}],
        },
        agent_name,
    )


def agent_message_item(author: str, recipient: str, text: str) -> dict[str, Any]:
    """``agent_message``: what one agent sent another (a task, a message, a result),
    attributed to its author."""
    return attributed(
        {
            "id": mint_id(IdKind.AGENT_MESSAGE),
            "type": "agent_message",
            "author": author,
            "recipient": recipient,
            "content": [{"type": "input_text", "text": text}],
        },
        author,
    )
