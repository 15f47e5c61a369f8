"""``tools: [{type: "mcp", ...}]`` entries as the gateway uses them, and their redacted
echo.

Secrets (``headers`` values, ``authorization``) live only in ``McpServer`` objects for
the length of a turn: the request the rest of the pipeline sees, stores and echoes has
them replaced by ``REDACTED`` (``redact_tools``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_api.errors import InvalidRequest

REDACTED = "[redacted]"
# Labels become part of function names the model sees (``<label>__<tool>``).
_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MAX_HEADERS = 32
_MAX_HEADER_LENGTH = 8192
_UNSUPPORTED = ("connector_id", "tunnel_id")


@dataclass(frozen=True)
class ToolFilter:
    """OpenAI's ``{tool_names?, read_only?}`` filter: a tool matches when every given
    criterion holds."""

    tool_names: frozenset[str] | None = None
    read_only: bool | None = None

    def matches(self, name: str, read_only: bool) -> bool:
        if self.tool_names is not None and name not in self.tool_names:
            return False
        return self.read_only is None or self.read_only == read_only


@dataclass(frozen=True)
class ApprovalPolicy:
    """``require_approval``: ``always``, ``never``, or ``{always?, never?}`` filters
    (a tool matching neither gets ``default``). Unset means ``always``, as with OpenAI:
    nothing is sent to a remote server unless the client allowed it."""

    default: Literal["always", "never"] = "always"
    always: ToolFilter | None = None
    never: ToolFilter | None = None

    def requires_approval(self, name: str, read_only: bool) -> bool:
        if self.always is not None and self.always.matches(name, read_only):
            return True
        if self.never is not None and self.never.matches(name, read_only):
            return False
        return self.default == "always"


@dataclass(frozen=True)
class McpServer:
    """One MCP server of a request: where it is, what the model may use, and the
    secrets to send it (kept out of ``repr`` so they reach no log line)."""

    index: int
    server_label: str
    server_url: str
    allowed: ToolFilter | None
    approval: ApprovalPolicy
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    def allows(self, name: str, read_only: bool) -> bool:
        return self.allowed is None or self.allowed.matches(name, read_only)


def is_mcp(tool: dict[str, Any]) -> bool:
    return tool.get("type") == "mcp"


def parse_servers(tools: Sequence[dict[str, Any]] | None) -> list[McpServer]:
    """The request's MCP servers, validated (400 with the offending ``param``)."""
    servers: list[McpServer] = []
    labels: set[str] = set()
    for index, tool in enumerate(tools or ()):
        if not is_mcp(tool):
            continue
        server = _parse_server(index, tool)
        if server.server_label in labels:
            raise InvalidRequest(
                f"Two MCP tools share the server_label '{server.server_label}'.",
                param=f"tools[{index}].server_label",
                code="duplicate_server_label",
            )
        labels.add(server.server_label)
        servers.append(server)
    return servers


def redact_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``tools`` with every MCP secret value replaced: what may be stored and echoed."""
    if tools is None or not any(is_mcp(tool) for tool in tools):
        return tools
    redacted: list[dict[str, Any]] = []
    for tool in tools:
        if is_mcp(tool):
            tool = dict(tool)
            if isinstance(tool.get("headers"), dict):
                tool["headers"] = dict.fromkeys(tool["headers"], REDACTED)
            if tool.get("authorization") is not None:
                tool["authorization"] = REDACTED
        redacted.append(tool)
    return redacted


def has_secrets(tools: Sequence[dict[str, Any]] | None) -> bool:
    return any(
        is_mcp(tool) and (bool(tool.get("headers")) or tool.get("authorization") is not None)
        for tool in tools or ()
    )


def _parse_server(index: int, tool: dict[str, Any]) -> McpServer:
    where = f"tools[{index}]"
    for name in _UNSUPPORTED:
        if tool.get(name) is not None:
            raise InvalidRequest(
                f"'{where}.{name}' is not supported here; give the server's 'server_url'.",
                param=f"{where}.{name}",
                code="unsupported_parameter",
            )
    label = tool.get("server_label")
    if not isinstance(label, str) or not _LABEL.match(label):
        raise InvalidRequest(
            f"'{where}.server_label' must be 1 to 64 letters, digits, '_' or '-'.",
            param=f"{where}.server_label",
            code="invalid_value",
        )
    url = tool.get("server_url")
    if not isinstance(url, str) or not url:
        raise InvalidRequest(
            f"'{where}.server_url' is required for an MCP tool.",
            param=f"{where}.server_url",
            code="missing_required_parameter",
        )
    return McpServer(
        index=index,
        server_label=label,
        server_url=url,
        allowed=_allowed_tools(tool.get("allowed_tools"), f"{where}.allowed_tools"),
        approval=_approval(tool.get("require_approval"), f"{where}.require_approval"),
        headers=_headers(tool, where),
    )


def _headers(tool: dict[str, Any], where: str) -> dict[str, str]:
    raw = tool.get("headers")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or len(raw) > _MAX_HEADERS:
        raise InvalidRequest(
            f"'{where}.headers' must be an object of at most {_MAX_HEADERS} string headers.",
            param=f"{where}.headers",
            code="invalid_type",
        )
    headers: dict[str, str] = {}
    for name, value in raw.items():
        # No value in the message: it is probably a secret.
        if (
            not isinstance(value, str)
            or not name
            or len(name) + len(value) > _MAX_HEADER_LENGTH
            or any(c in name + value for c in "\r\n\0")
        ):
            raise InvalidRequest(
                f"'{where}.headers' has an invalid value for header '{name[:64]}'.",
                param=f"{where}.headers",
                code="invalid_value",
            )
        headers[name] = value
    token = tool.get("authorization")
    if token is not None:
        if not isinstance(token, str) or not token or any(c in token for c in "\r\n\0"):
            raise InvalidRequest(
                f"'{where}.authorization' must be a token string.",
                param=f"{where}.authorization",
                code="invalid_value",
            )
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _allowed_tools(value: Any, param: str) -> ToolFilter | None:
    if value is None:
        return None
    if isinstance(value, list):
        return ToolFilter(tool_names=_names(value, param))
    return _filter(value, param)


def _approval(value: Any, param: str) -> ApprovalPolicy:
    if value is None or value == "always":
        return ApprovalPolicy("always")
    if value == "never":
        return ApprovalPolicy("never")
    if not isinstance(value, dict) or not set(value) <= {"always", "never"}:
        raise InvalidRequest(
            f"'{param}' must be 'always', 'never' or an object with 'always' and/or 'never'.",
            param=param,
            code="invalid_value",
        )
    always = value.get("always")
    never = value.get("never")
    # Naming only the tools that need approval means the others do not; anything else
    # leaves unnamed tools needing it.
    return ApprovalPolicy(
        "never" if never is None and always is not None else "always",
        always=None if always is None else _filter(always, f"{param}.always"),
        never=None if never is None else _filter(never, f"{param}.never"),
    )


def _filter(value: Any, param: str) -> ToolFilter:
    if not isinstance(value, dict) or not set(value) <= {"tool_names", "read_only"}:
        raise InvalidRequest(
            f"'{param}' must be a list of tool names or an object with 'tool_names' "
            "and/or 'read_only'.",
            param=param,
            code="invalid_value",
        )
    names = value.get("tool_names")
    read_only = value.get("read_only")
    if read_only is not None and not isinstance(read_only, bool):
        raise InvalidRequest(
            f"'{param}.read_only' must be a boolean.",
            param=f"{param}.read_only",
            code="invalid_type",
        )
    return ToolFilter(
        tool_names=None if names is None else _names(names, f"{param}.tool_names"),
        read_only=read_only,
    )


def _names(value: Any, param: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise InvalidRequest(
            f"'{param}' must be a list of tool names.", param=param, code="invalid_type"
        )
    return frozenset(value)
