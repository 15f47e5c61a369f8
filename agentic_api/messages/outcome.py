"""How an Anthropic Messages turn ended, and what is done with that: the metrics, and
(with AGENTIC_MESSAGES_RECORD_TURNS) one recorded row for the admin views."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentic_api import tracing
from agentic_api.log import get_logger
from agentic_api.metrics import TurnMeter
from agentic_api.runtime import Runtime
from agentic_api.storage.message_turns import MessageTurnRecord, MessageTurnRepository
from agentic_api.wire.anthropic import MessagesRequest
from lineage import SessionSource

log = get_logger("agentic_api.messages")

_USAGE_FIELDS = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)


@dataclass
class MessageUsage:
    """Anthropic's usage, as the answer (or the stream's ``message_start`` and
    ``message_delta`` events, each carrying part of it) reported it."""

    reported: bool = False
    input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    output_tokens: int = 0

    def merge(self, usage: Any) -> None:
        """Takes the fields ``usage`` has; later events' values replace earlier ones."""
        if not isinstance(usage, Mapping):
            return
        for name in _USAGE_FIELDS:
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, name, value)
                self.reported = True

    @property
    def prompt_tokens(self) -> int:
        # Anthropic counts the cached and cache-writing parts of the prompt apart from
        # input_tokens (vLLM does the same: input = prompt - cached).
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass
class MessageOutcome:
    # completed, incomplete (stopped by max_tokens), failed, cancelled (the client left).
    status: str = "failed"
    stop_reason: str | None = None
    message_id: str | None = None
    usage: MessageUsage = field(default_factory=MessageUsage)

    def answered(self, message: Mapping[str, Any]) -> None:
        """Takes what a whole message object says (the JSON answer, or ``message_start``)."""
        message_id = message.get("id")
        if isinstance(message_id, str):
            self.message_id = message_id
        self.stopped(message.get("stop_reason"))
        self.usage.merge(message.get("usage"))

    def stopped(self, stop_reason: Any) -> None:
        if isinstance(stop_reason, str):
            self.stop_reason = stop_reason
            self.status = "incomplete" if stop_reason == "max_tokens" else "completed"


@dataclass(frozen=True)
class MessageContext:
    """Who sent the turn and where it was placed: what an outcome is recorded under."""

    tenant_id: str
    request: MessagesRequest
    session_id: str
    session_source: SessionSource


async def settle(
    services: Runtime, context: MessageContext, meter: TurnMeter, outcome: MessageOutcome
) -> None:
    """Counts the outcome and, when the operator asked for it, records it. A record that
    cannot be written is logged, never the client's failure: the model has already
    answered (and a failed or cancelled turn has nobody left to tell)."""
    usage = outcome.usage
    _trace(context, outcome)
    meter.finished_with(
        outcome.status,
        input_tokens=usage.prompt_tokens if usage.reported else None,
        cached_tokens=usage.cache_read_input_tokens,
        output_tokens=usage.output_tokens,
    )
    if not services.settings.messages_record_turns:
        return
    record = MessageTurnRecord(
        tenant_id=context.tenant_id,
        session_id=context.session_id,
        session_source=context.session_source.value,
        model=context.request.model,
        stream=context.request.stream,
        status=outcome.status,
        stop_reason=outcome.stop_reason,
        message_id=outcome.message_id,
        message_count=len(context.request.messages),
        input_tokens=usage.prompt_tokens if usage.reported else None,
        cached_tokens=usage.cache_read_input_tokens if usage.reported else None,
        cache_creation_tokens=usage.cache_creation_input_tokens if usage.reported else None,
        output_tokens=usage.output_tokens if usage.reported else None,
    )
    try:
        async with services.db.write() as session:
            await MessageTurnRepository(session).add(record)
    except Exception:
        log.exception("message turn not recorded", session_id=context.session_id)


# Anthropic's stop reasons as the GenAI conventions' finish reasons.
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
}


def _trace(context: MessageContext, outcome: MessageOutcome) -> None:
    """The turn's request span: one model call (an LLM span, a Langfuse generation) with
    its session and usage, as a Responses round records them."""
    traced = tracing.current()
    tracing.record_request(traced, context.request.model, context.session_id)
    usage = outcome.usage
    stop = outcome.stop_reason
    tracing.record_usage(
        traced,
        response_id=outcome.message_id,
        model=context.request.model,
        prompt=usage.prompt_tokens if usage.reported else None,
        completion=usage.output_tokens if usage.reported else None,
        cached=usage.cache_read_input_tokens if usage.reported else None,
        written=usage.cache_creation_input_tokens if usage.reported else None,
        reasons=[_FINISH_REASONS.get(stop, stop)] if stop else [outcome.status],
    )
