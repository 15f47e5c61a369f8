"""The six actions of the hosted multi-agent beta as every agent's model sees them: function
tools (beside the client's own), with argument schemas shaped like the ones OpenAI's models
and Codex use (``task_name`` + ``message`` to spawn, ``target`` + ``message`` to talk to an
agent, an optional ``path_prefix`` to list), and how their arguments are read.

A bad argument is the model's mistake, not the client's: it is answered as the action's
result (``ActionRefused``'s text, which the model reads and can correct), never as an
HTTP error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from agentic_api.wire.multi_agent import ACTIONS, ROOT_AGENT

# A spawned agent's name is its parent's followed by ``/<task_name>``.
TASK_NAME = re.compile(r"^[a-z0-9_]{1,64}$")
# Longest message one agent may send another (a task, a follow-up): bounds what a model
# that loops can pile into the tree's prompts.
MAX_MESSAGE_CHARS = 32_000
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

NAMES = frozenset(ACTIONS)


class ActionRefused(Exception):
    """An action the tree cannot do as asked; its text is the action's result."""


@dataclass(frozen=True)
class Spawn:
    task_name: str
    message: str


@dataclass(frozen=True)
class Wait:
    targets: tuple[str, ...] | None
    timeout_ms: int | None


@dataclass(frozen=True)
class Message:
    target: str
    message: str


@dataclass(frozen=True)
class Target:
    target: str


@dataclass(frozen=True)
class ListAgents:
    path_prefix: str | None


Arguments = Spawn | Wait | Message | Target | ListAgents


def parse(action: str, raw: str) -> Arguments:
    """The action's arguments, or ``ActionRefused`` saying what is wrong with them."""
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError as exc:
        raise ActionRefused(f"{action}: the arguments are not valid JSON ({exc}).") from exc
    if not isinstance(value, dict):
        raise ActionRefused(f"{action}: the arguments must be a JSON object.")
    if action == "spawn_agent":
        task_name = _text(value, "task_name", action)
        if not TASK_NAME.match(task_name):
            raise ActionRefused(
                f"spawn_agent: task_name {task_name!r} must be 1 to 64 lowercase letters, "
                "digits or underscores."
            )
        return Spawn(task_name, _text(value, "message", action, limit=MAX_MESSAGE_CHARS))
    if action == "wait_agent":
        targets = value.get("targets")
        if targets is not None and (
            not isinstance(targets, list) or not all(isinstance(t, str) for t in targets)
        ):
            raise ActionRefused("wait_agent: targets must be a list of agent names.")
        timeout = value.get("timeout_ms")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0
        ):
            raise ActionRefused("wait_agent: timeout_ms must be a non-negative integer.")
        return Wait(
            None if targets is None else tuple(targets),
            None if timeout is None else min(timeout, MAX_WAIT_MS),
        )
    if action in ("send_message", "followup_task"):
        return Message(
            _text(value, "target", action),
            _text(value, "message", action, limit=MAX_MESSAGE_CHARS),
        )
    if action == "interrupt_agent":
        return Target(_text(value, "target", action))
    prefix = value.get("path_prefix")
    if prefix is not None and not isinstance(prefix, str):
        raise ActionRefused("list_agents: path_prefix must be a string.")
    return ListAgents(prefix)


def _text(value: dict[str, Any], key: str, action: str, *, limit: int = 1000) -> str:
    text = value.get(key)
    if not isinstance(text, str) or not text.strip():
        raise ActionRefused(f"{action}: '{key}' is required (a non-empty string).")
    if len(text) > limit:
        raise ActionRefused(f"{action}: '{key}' is longer than {limit} characters.")
    return text


def resolve(target: str, caller: str) -> str:
    """An agent's full name from what a model wrote: a full name as is, else a name
    relative to the caller (its own subagent's task_name)."""
    target = target.strip().rstrip("/")
    if target == ROOT_AGENT or target.startswith(ROOT_AGENT + "/"):
        return target
    return f"{caller}/{target.lstrip('/')}"
