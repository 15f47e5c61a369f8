"""What the simulated model does with the next generation request.

Tests push behaviors onto a FIFO queue (``SimServer.push``); each generation request
(``/v1/responses`` or ``/v1/chat/completions``) that passes validation takes the next
one, or the default echo reply when the queue is empty. Every behavior has ``delay``
(seconds before anything is sent: queueing plus prefill) and the streaming ones have
``event_delay`` (seconds between two stream events: decode speed).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias


def _json_text(value: str | Mapping[str, Any]) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True, init=False)
class Call:
    """One function call the model emits. ``arguments`` may be a dict (JSON-encoded)."""

    name: str
    arguments: str
    call_id: str | None

    def __init__(
        self, name: str, arguments: str | Mapping[str, Any] = "{}", call_id: str | None = None
    ) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "arguments", _json_text(arguments))
        object.__setattr__(self, "call_id", call_id)


@dataclass(frozen=True)
class Reply:
    """A text answer, optionally preceded by reasoning.

    ``newline_pairs_as_one``: the model generates each "\n\n" as one token, as real BPE
    models often do, while the text sent back is tokenized as two (the simulator's
    tokenizer always splits newlines): the replayed history then diverges from the
    generated tokens there, like a real re-tokenization divergence."""

    text: str = ""
    reasoning: str | None = None
    delay: float = 0.0
    event_delay: float = 0.0
    newline_pairs_as_one: bool = False
    # How ``enable_response_messages`` reports this request's ids: "exact"; "omit" (no
    # ids, as an upstream that stopped reporting them); "short" (one output id missing,
    # so the ids disagree with usage).
    report_tokens: str = "exact"
    # Streaming: after the response head (the request accepted), send nothing until the
    # test sets this (a long prefill whose end the test decides). Not in the JSON form.
    hold: threading.Event | None = field(default=None, compare=False)


@dataclass(frozen=True, init=False)
class ToolCalls:
    """One or several (parallel) function calls, optionally after reasoning and text."""

    calls: tuple[Call, ...]
    text: str | None
    reasoning: str | None
    delay: float
    event_delay: float

    def __init__(
        self,
        calls: Sequence[Call],
        text: str | None = None,
        reasoning: str | None = None,
        delay: float = 0.0,
        event_delay: float = 0.0,
    ) -> None:
        if not calls:
            raise ValueError("ToolCalls needs at least one Call")
        object.__setattr__(self, "calls", tuple(calls))
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "reasoning", reasoning)
        object.__setattr__(self, "delay", delay)
        object.__setattr__(self, "event_delay", event_delay)


Content: TypeAlias = Reply | ToolCalls


@dataclass(frozen=True)
class Fail:
    """An HTTP error before any generation. ``body=None`` gives vLLM's error body."""

    status: int = 500
    body: bytes | str | Mapping[str, Any] | None = None
    message: str = "Internal server error"
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class Disconnect:
    """Close the TCP connection: after ``after_events`` stream events (never the
    terminal one), or, for a non-streaming request, without sending any response."""

    after_events: int = 0
    reply: Content | None = None
    delay: float = 0.0
    event_delay: float = 0.0


@dataclass(frozen=True)
class Hang:
    """Stop answering (after ``after_events`` stream events) until the client goes
    away; the request is then recorded as aborted."""

    after_events: int = 0
    reply: Content | None = None
    delay: float = 0.0
    event_delay: float = 0.0


@dataclass(frozen=True)
class StreamError:
    """Streaming: send ``after_events`` events, then an error event, then end the stream
    cleanly (as vLLM does on an engine error). Non-streaming: a 500 error body."""

    after_events: int = 2
    message: str = "Internal server error"
    code: str = "internal_error"
    reply: Content | None = None
    delay: float = 0.0
    event_delay: float = 0.0


@dataclass(frozen=True, init=False)
class Malformed:
    """A 200 answer that is not a well-formed response, as a broken upstream or a proxy in
    front of one might send. Non-streaming: ``body`` as the JSON answer (bytes or str sent
    as they are, anything else JSON-encoded). Streaming: ``events`` as SSE frames (a dict
    JSON-encoded, a str or bytes sent verbatim as the frame's data), then the stream ends."""

    body: Any
    events: tuple[Any, ...]
    delay: float
    event_delay: float

    def __init__(
        self,
        body: Any = None,
        events: Sequence[Any] = (),
        delay: float = 0.0,
        event_delay: float = 0.0,
    ) -> None:
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "events", tuple(events))
        object.__setattr__(self, "delay", delay)
        object.__setattr__(self, "event_delay", event_delay)


Behavior: TypeAlias = Reply | ToolCalls | Fail | Disconnect | Hang | StreamError | Malformed


def content_of(behavior: Behavior) -> Content | None:
    """The reply a behavior generates (None: derive the default reply)."""
    if isinstance(behavior, Reply | ToolCalls):
        return behavior
    if isinstance(behavior, Disconnect | Hang | StreamError):
        return behavior.reply
    return None


def event_delay_of(behavior: Behavior) -> float:
    return 0.0 if isinstance(behavior, Fail) else behavior.event_delay


# --- JSON form, for the standalone server's control endpoint ------------------------


def _content_from_json(data: Mapping[str, Any] | None) -> Content | None:
    if data is None:
        return None
    made = behavior_from_json(data)
    if not isinstance(made, Reply | ToolCalls):
        raise ValueError("'reply' must be a reply or tool_calls behavior")
    return made


def behavior_from_json(data: Mapping[str, Any]) -> Behavior:
    """Build a behavior from ``{"kind": "reply" | "tool_calls" | "fail" | "disconnect"
    | "hang" | "stream_error" | "malformed", ...fields}``; nested ``reply`` and ``calls``
    likewise."""
    fields_ = {k: v for k, v in data.items() if k != "kind"}
    kind = data.get("kind")
    if kind == "reply":
        return Reply(**fields_)
    if kind == "tool_calls":
        calls = tuple(Call(**c) for c in fields_.pop("calls", []))
        return ToolCalls(calls=calls, **fields_)
    if kind == "fail":
        return Fail(**fields_)
    if kind == "malformed":
        return Malformed(**fields_)
    if kind in ("disconnect", "hang", "stream_error"):
        reply = _content_from_json(fields_.pop("reply", None))
        if kind == "disconnect":
            return Disconnect(reply=reply, **fields_)
        if kind == "hang":
            return Hang(reply=reply, **fields_)
        return StreamError(reply=reply, **fields_)
    raise ValueError(f"unknown behavior kind: {kind!r}")
