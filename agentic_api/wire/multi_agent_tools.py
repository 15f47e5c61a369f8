"""The six actions of the hosted multi-agent beta as every agent's model sees them: function
tools (after the client's own), with argument schemas shaped like the ones OpenAI's models
and Codex use (``task_name`` + ``message`` to spawn, ``target`` + ``message`` to talk to an
agent, an optional ``path_prefix`` to list). How their arguments are read is
``turns/kinds/multi_agent/actions.py``.

Here, below the turn, because they are part of what a multi-agent turn's model is shown
before the history: the turn's execution fingerprint holds them (``turns/prepare``), so a
continuation rendered without them (or a tree continuing a plain turn) is told apart by
its tools.
"""

from __future__ import annotations

import re
from typing import Any

# A spawned agent's name is its parent's followed by ``/<task_name>``.
TASK_NAME = re.compile(r"^[a-z0-9_]{1,64}$")
MAX_WAIT_MS = 3_600_000


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    # Strict (every property required, optional ones nullable): a model server that
    # decodes under the schema (vLLM with a forced tool choice, or strict tools) then
    # produces arguments the tree accepts; without it, a small model's forced call was
    # free text (seen with SmolLM2-135M on vLLM 0.32).
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        },
        "strict": True,
    }


def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "type": [schema["type"], "null"]}


TARGET = _string(
    "The agent: its full name (such as /root/research) or, for your own subagent, its task_name."
)

TOOLS: tuple[dict[str, Any], ...] = (
    _tool(
        "spawn_agent",
        "Start a subagent on a well-scoped task. It sees this conversation up to now and "
        "then the task; it works alongside you and reports its final answer back to you. "
        "Returns its name.",
        {
            "task_name": {
                **_string("Short name of the task: lowercase letters, digits and underscores."),
                # Also steers a model decoding under a schema (a forced tool choice).
                "pattern": TASK_NAME.pattern,
            },
            "message": _string("The task: what to do, its constraints and what to report back."),
        },
    ),
    _tool(
        "wait_agent",
        "Wait until agents have finished their current task (all of your subagents when "
        "no targets are given), or until the timeout. Returns each one's status and final "
        "answer.",
        {
            "targets": _optional(
                {"type": "array", "items": TARGET, "description": "Agents to wait for."}
            ),
            "timeout_ms": _optional(
                {
                    "type": "integer",
                    "description": f"Longest wait in milliseconds (at most {MAX_WAIT_MS}).",
                }
            ),
        },
    ),
    _tool(
        "send_message",
        "Send a message to another agent. It reads it before its next step; the message "
        "does not start a new task.",
        {"target": TARGET, "message": _string("The message.")},
    ),
    _tool(
        "followup_task",
        "Give a subagent a follow-up task. A subagent that has finished starts on it at "
        "once; one still working reads it before its next step.",
        {"target": TARGET, "message": _string("The follow-up task.")},
    ),
    _tool(
        "interrupt_agent",
        "Stop a subagent's current task (and its own subagents). Returns its status "
        "before the interruption.",
        {"target": TARGET},
    ),
    _tool(
        "list_agents",
        "List the agents of this tree with their status and latest task.",
        {
            "path_prefix": _optional(
                _string("Only agents whose name starts with this, such as /root/a.")
            )
        },
    ),
)
