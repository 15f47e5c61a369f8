"""What a server process imports before its first request: the MCP SDK (~27 MiB
resident) waits for the first turn that opens an MCP session."""

from __future__ import annotations

import subprocess
import sys


def test_the_server_modules_leave_the_mcp_sdk_unimported() -> None:
    probe = (
        "import sys, agentic_api.cli, agentic_api.app;"
        "print(sorted(m for m in ('mcp', 'httpx2', 'mcp_types') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"
