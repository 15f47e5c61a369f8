"""How the arguments of the six actions of the hosted multi-agent beta are read (the
function tools every agent's model sees them as are ``wire/multi_agent_tools.py``).

A bad argument is the model's mistake, not the client's: it is answered as the action's
result (``ActionRefused``'s text, which the model reads and can correct), never as an
HTTP error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from agentic_api.wire.multi_agent import ACTIONS, ROOT_AGENT
from agentic_api.wire.multi_agent_tools import MAX_WAIT_MS, TASK_NAME

# Longest message one agent may send another (a task, a follow-up): bounds what a model
# that loops can pile into the tree's prompts.
MAX_MESSAGE_CHARS = 32_000

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
