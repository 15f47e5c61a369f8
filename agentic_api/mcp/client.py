"""Talking to one MCP server over streamable HTTP for the length of one turn.

A turn opens one session per MCP server (``McpConnection``), lists its tools once and
makes every call of every round on that session, then closes it. Everything here is
bounded: connecting and listing by ``mcp_list_timeout_seconds``, each call by
``mcp_call_timeout_seconds``, each output by ``mcp_max_output_bytes``.

Failures of a *call* are results, not exceptions: the model is told the call failed and
the client sees an ``mcp_call`` with an ``error`` (OpenAI's ``McpToolCallError``
shapes). Failing to *list* raises ``McpListFailed`` (424, as OpenAI answers), since the
model cannot be shown tools the server would not name.

The server's headers (secrets) go into the HTTP client and nowhere else: no error
message, log line or stored object here carries them.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    # The MCP SDK (and its HTTP client) is imported by the first turn that opens a
    # session, not by every server process: it is ~27 MiB resident, which a server whose
    # clients never name an MCP tool would carry for nothing.
    import httpx2
    from mcp import Client
    from mcp_types import CallToolResult

from agentic_api import tracing
from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.mcp.specs import McpServer
from agentic_api.settings import Settings
from agentic_api.wire import mcp as wire
from agentic_api.wire.limits import MAX_TOOLS

log = get_logger("agentic_api.mcp.client")

# JSON-RPC codes for failures that never reached the tool (mcp_types uses the same).
CONNECTION_FAILED = -32000
REQUEST_TIMEOUT = -32001
INVALID_ARGUMENTS = -32602
INTERNAL_ERROR = -32603
# A server that paginates forever must not hold the turn.
_MAX_LIST_PAGES = 20
# Closing a session sends a DELETE; a server that does not answer must not hold the turn.
_CLOSE_SECONDS = 5.0


_SDK_MODULES = ("httpx2", "mcp", "mcp.client.streamable_http")


async def load_sdk() -> None:
    """Imports the MCP SDK, once per process, in a thread: it takes a second or more on
    a loaded machine, which on the event loop would stall every other stream."""
    for name in _SDK_MODULES:
        if name not in sys.modules:
            await asyncio.to_thread(importlib.import_module, name)


@dataclass(frozen=True)
class McpLimits:
    list_timeout: float
    call_timeout: float
    max_output_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> McpLimits:
        return cls(
            list_timeout=settings.mcp_list_timeout_seconds,
            call_timeout=settings.mcp_call_timeout_seconds,
            max_output_bytes=settings.mcp_max_output_bytes,
        )


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None

    @property
    def read_only(self) -> bool:
        return bool((self.annotations or {}).get("readOnlyHint"))

    def as_wire(self) -> dict[str, Any]:
        return wire.listed_tool(self.name, self.input_schema, self.description, self.annotations)


@dataclass(frozen=True)
class CallOutcome:
    """A finished tool call: ``output`` (bounded) or ``error`` (a McpToolCallError)."""

    output: str | None
    error: dict[str, Any] | None
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def status(self) -> str:
        """The status of its ``mcp_call`` item."""
        return "failed" if self.failed else "completed"

    def model_text(self) -> str:
        """What the model is told: the output, or the failure in a sentence."""
        if self.error is None:
            return self.output or ""
        return f"Error: {error_text(self.error)}"


class McpListFailed(ApiError):
    """An MCP server could not be reached or would not list its tools."""

    status_code = 424
    error_type = "external_connector_error"
    code = "mcp_list_tools_failed"


class McpSessionLost(Exception):
    """The session ended (the transport failed) before or during a call."""


class McpConnection:
    """One session with one MCP server, held by a task of its own.

    The SDK's transport runs an anyio task group for as long as the session is open, and
    a task group that fails cancels the task that entered it. Entered in the turn's own
    task, a crashing transport would cancel the whole turn; entered here, it ends only
    this session, and calls in flight fail as results.
    """

    def __init__(self, server: McpServer, limits: McpLimits) -> None:
        self.server = server
        self.limits = limits
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._reconnecting = asyncio.Lock()
        # The last HTTP error status the server answered, which the SDK turns into a
        # generic JSON-RPC error; kept to report it as OpenAI's `http_error`.
        self._http_status: int | None = None

    async def open(self) -> None:
        await load_sdk()
        self._closing = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._hold(ready))
        try:
            # The handshake inside is bounded by the session's read timeout and the HTTP
            # client's; this bound catches anything that still hangs.
            await asyncio.wait_for(asyncio.shield(ready), self.limits.list_timeout + _CLOSE_SECONDS)
        except BaseException as exc:
            await self.close()
            if isinstance(exc, Exception):
                raise self._list_failed(exc) from None
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        try:
            async with (
                httpx2.AsyncClient(
                    headers=self.server.headers,
                    # Reads wait longer than a call may take: the SDK's own timeout must
                    # fire first, since an HTTP timeout inside the transport ends the
                    # whole session.
                    timeout=httpx2.Timeout(
                        self.limits.list_timeout, read=self.limits.call_timeout + _CLOSE_SECONDS
                    ),
                    event_hooks={"response": [self._note_status]},
                ) as http,
                Client(
                    streamable_http_client(self.server.server_url, http_client=http),
                    read_timeout_seconds=self.limits.list_timeout,
                    cache=None,
                ) as client,
            ):
                self._client = client
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("closed"))
            elif isinstance(exc, Exception):
                log.info(
                    "mcp session ended", server_label=self.server.server_label, error=_kind(exc)
                )
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._closing.set()
        # A goodbye (the DELETE ending the session) that does not come quickly is
        # abandoned: the turn's outcome does not depend on it.
        done, _ = await asyncio.wait({runner}, timeout=_CLOSE_SECONDS)
        if not done:
            runner.cancel()
            await asyncio.wait({runner}, timeout=_CLOSE_SECONDS)

    async def list_tools(self) -> list[ListedTool]:
        """Every tool the server lists (all pages), in its order."""
        tools: list[ListedTool] = []
        cursor: str | None = None
        try:
            client = self._connected()
            with anyio.fail_after(self.limits.list_timeout):
                for _ in range(_MAX_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(_listed(tool) for tool in page.tools)
                    cursor = page.next_cursor
                    if cursor is None or len(tools) > MAX_TOOLS:
                        break
        except Exception as exc:
            raise self._list_failed(exc) from None
        if len(tools) > MAX_TOOLS:
            raise McpListFailed(
                f"MCP server '{self.server.server_label}' lists more than {MAX_TOOLS} tools; "
                "narrow them with 'allowed_tools' on the server side.",
                param=f"tools[{self.server.index}]",
            )
        return tools

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> CallOutcome:
        """Runs one call to its end; failures come back as an outcome with ``error``."""
        # Its name and server only: the arguments and result may hold anything.
        with tracing.span(
            f"execute_tool {name}",
            attributes=tracing.tool_call_attributes(name, self.server.server_label),
        ) as traced:
            outcome = await self._call_tool(name, arguments)
            if outcome.failed:
                traced.set_attribute("error.type", "tool_error")
            return outcome

    async def _call_tool(self, name: str, arguments: Mapping[str, Any]) -> CallOutcome:
        started = time.monotonic()
        self._http_status = None
        timed_out = wire.protocol_error(
            REQUEST_TIMEOUT, f"The tool call timed out after {self.limits.call_timeout:g} seconds."
        )
        try:
            # The SDK's own timeout, so it abandons the request cleanly (and tells the
            # server); the outer one only guards against a transport that hangs anyway.
            await self._reconnect_if_lost()
            with anyio.fail_after(self.limits.call_timeout + 2 * _CLOSE_SECONDS):
                result = await self._connected().call_tool(
                    name, dict(arguments), read_timeout_seconds=self.limits.call_timeout
                )
        except TimeoutError:
            return CallOutcome(None, timed_out, time.monotonic() - started)
        except Exception as exc:
            from mcp import MCPError

            leaf = _leaf(exc)
            if isinstance(leaf, MCPError) and leaf.code == REQUEST_TIMEOUT:
                return CallOutcome(None, timed_out, time.monotonic() - started)
            return CallOutcome(None, self._call_error(exc), time.monotonic() - started)
        return self._outcome(result, time.monotonic() - started)

    async def _reconnect_if_lost(self) -> None:
        """A session the transport ended (a dropped connection, a server restart) is
        opened again once for the next call rather than failing every later round."""
        async with self._reconnecting:
            if self._client is not None or self._runner is None:
                return
            log.info("mcp session reconnecting", server_label=self.server.server_label)
            await self.close()
            await self.open()

    def _connected(self) -> Client:
        if self._client is None:
            raise McpSessionLost("the MCP session is not open")
        return self._client

    async def _note_status(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._http_status = response.status_code

    def _outcome(self, result: CallToolResult, seconds: float) -> CallOutcome:
        text = bound_text(_result_text(result), self.limits.max_output_bytes)
        if result.is_error:
            content = [{"type": "text", "text": text}]
            return CallOutcome(None, wire.execution_error(content), seconds)
        return CallOutcome(text, None, seconds)

    def _call_error(self, exc: Exception) -> dict[str, Any]:
        import httpx2
        from mcp import MCPError

        leaf = _leaf(exc)
        if self._http_status is not None:
            return wire.http_error(self._http_status, _http_reason(self._http_status))
        if isinstance(leaf, MCPError):
            return wire.protocol_error(leaf.code, _short(leaf.message))
        if isinstance(leaf, McpSessionLost | McpListFailed):
            return wire.protocol_error(
                CONNECTION_FAILED, "The session with the MCP server was lost."
            )
        if isinstance(leaf, httpx2.HTTPError):
            return wire.protocol_error(
                CONNECTION_FAILED, f"Could not reach the MCP server ({_kind(leaf)})."
            )
        log.warning(
            "mcp call failed unexpectedly",
            server_label=self.server.server_label,
            error=_kind(leaf),
        )
        return wire.protocol_error(INTERNAL_ERROR, f"The MCP call failed ({_kind(leaf)}).")

    def _list_failed(self, exc: Exception) -> McpListFailed:
        label = self.server.server_label
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {self.limits.list_timeout:g} seconds"
        elif self._http_status is not None:
            reason = f"HTTP status {self._http_status}"
        else:
            from mcp import MCPError

            leaf = _leaf(exc)
            reason = _short(leaf.message) if isinstance(leaf, MCPError) else f"{_kind(leaf)}"
        log.warning("mcp list tools failed", server_label=label, reason=reason)
        return McpListFailed(
            f"Error retrieving tool list from MCP server '{label}': {reason}.",
            param=f"tools[{self.server.index}]",
        )


def bound_text(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (on a character boundary), with
    a marker saying how much was dropped, so neither the model nor the client mistakes
    a cut output for a whole one."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    kept = data[:max_bytes].decode(errors="ignore")
    return f"{kept}\n[output truncated: {len(kept.encode())} of {len(data)} bytes shown]"


def error_text(error: Mapping[str, Any]) -> str:
    """One readable sentence for a McpToolCallError."""
    if error.get("type") == "mcp_tool_execution_error":
        parts = error.get("content") or []
        texts = [p.get("text", "") for p in parts if isinstance(p, dict)]
        return " ".join(t for t in texts if t) or "the tool reported an error"
    if error.get("type") == "http_error":
        return f"the MCP server answered HTTP {error.get('code')} ({error.get('message')})"
    return str(error.get("message") or "the tool call failed")


def _listed(tool: Any) -> ListedTool:
    annotations = (
        tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
        if tool.annotations is not None
        else None
    )
    return ListedTool(
        name=tool.name,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        annotations=annotations or None,
    )


def _result_text(result: CallToolResult) -> str:
    """The result's content as one string: text blocks as they are, other blocks (images,
    resources) as their JSON; structured content only when there is nothing else."""
    texts: list[str] = []
    for block in result.content:
        if getattr(block, "type", None) == "text":
            texts.append(block.text)  # type: ignore[union-attr]
        else:
            texts.append(json.dumps(block.model_dump(mode="json", by_alias=True)))
    if not texts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(texts)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups from the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _kind(exc: BaseException) -> str:
    return type(exc).__name__


def _short(message: str, limit: int = 500) -> str:
    return message if len(message) <= limit else message[:limit] + "…"


def _http_reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "HTTP error"
