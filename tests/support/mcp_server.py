"""A real MCP server (the ``mcp`` package's ``MCPServer``, streamable HTTP) on a loopback
port in a background thread, with a few tools for the gateway's tests.

Tools: ``add`` (numbers), ``echo`` (text), ``whoami`` (echoes the ``X-Api-Key`` header it
received, to prove secrets reach the server), ``fail`` (raises), ``slow`` (sleeps),
``huge`` (a very long output) and ``lookup`` (read-only). Every call is recorded with the
headers it came with (``McpTestServer.calls``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from tests.support.servers import ThreadedServer


@dataclass(frozen=True)
class RecordedCall:
    tool: str
    arguments: dict[str, Any]
    headers: dict[str, str]


@dataclass
class McpTestServer:
    """The running server: its URL and what it was asked."""

    url: str
    calls: list[RecordedCall] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _thread_server: ThreadedServer | None = None

    def record(self, tool: str, arguments: dict[str, Any], ctx: Context) -> None:
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        with self.lock:
            self.calls.append(RecordedCall(tool, arguments, headers))

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()

    def calls_of(self, tool: str) -> list[RecordedCall]:
        with self.lock:
            return [c for c in self.calls if c.tool == tool]

    def stop(self) -> None:
        if self._thread_server is not None:
            self._thread_server.stop()


def build_server(state: McpTestServer) -> MCPServer:
    server = MCPServer("gateway-test-tools")

    @server.tool()
    def add(a: float, b: float, ctx: Context) -> float:
        """Add two numbers."""
        state.record("add", {"a": a, "b": b}, ctx)
        return a + b

    @server.tool()
    def echo(text: str, ctx: Context) -> str:
        """Return the text unchanged."""
        state.record("echo", {"text": text}, ctx)
        return text

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Say which API key the call came with."""
        state.record("whoami", {}, ctx)
        key = (ctx.headers or {}).get("x-api-key")
        return "anonymous" if key is None else f"key of length {len(key)}"

    @server.tool()
    def fail(reason: str, ctx: Context) -> str:
        """Always fails."""
        state.record("fail", {"reason": reason}, ctx)
        raise ToolError(f"the tool failed on purpose: {reason}")

    @server.tool()
    async def slow(seconds: float, ctx: Context) -> str:
        """Sleep, then answer."""
        state.record("slow", {"seconds": seconds}, ctx)
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def huge(size: int, ctx: Context) -> str:
        """Return `size` characters."""
        state.record("huge", {"size": size}, ctx)
        return "x" * size

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(key: str, ctx: Context) -> str:
        """Read a value (read-only)."""
        state.record("lookup", {"key": key}, ctx)
        return f"value-of-{key}"

    return server


def start_mcp_server() -> McpTestServer:
    state = McpTestServer(url="")
    app = build_server(state).streamable_http_app()
    running = ThreadedServer(app, strict=False).start()
    state.url = f"{running.url}/mcp"
    state._thread_server = running
    return state


def mcp_server_fixtures() -> tuple[Any, Any]:
    """For a test module: ``mcp_server`` (started once for the module) and an autouse
    fixture that forgets its recorded calls before each test. Assign both at module level
    (``mcp_server, _fresh_mcp_calls = mcp_server_fixtures()``)."""

    @pytest.fixture(scope="module", name="mcp_server")
    def running() -> Iterator[McpTestServer]:
        server = start_mcp_server()
        yield server
        server.stop()

    @pytest.fixture(autouse=True, name="_fresh_mcp_calls")
    def fresh(mcp_server: McpTestServer) -> None:
        mcp_server.reset()

    return running, fresh
