"""One Anthropic Messages API turn: the client's request forwarded, as sent, to the
upstream's ``/v1/messages`` (vLLM serves it natively), with what only we can add.

The client owns its history and resends all of it, so there is nothing to rehydrate and,
by default, nothing to store. What the turn adds is the gateway's part: the tenant's
``cache_salt`` (the client's dropped), an ``X-Session-ID`` that keeps the session on
the replica holding its KV cache, the client's ``anthropic-version`` / ``anthropic-beta``
headers, metrics, and the optional record. The body is the client's bytes with only
the salt changed, so ``cache_control`` markers, key order and number spellings reach
the model server exactly as sent, and a client that resends its history byte for byte
gets a byte-identical prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentic_api.errors import UpstreamError
from agentic_api.messages.outcome import MessageContext, MessageOutcome, settle
from agentic_api.metrics import TurnMeter
from agentic_api.runtime import Runtime
from agentic_api.turns.data.caller import Caller
from agentic_api.upstream.errors import UpstreamInterrupted
from agentic_api.wire.anthropic import MessagesRequest, forwarded_headers
from lineage import resolve_stateless_session

API = "messages"


@dataclass(frozen=True)
class PreparedMessage:
    context: MessageContext
    body: bytes
    headers: dict[str, str]

    @property
    def request(self) -> MessagesRequest:
        return self.context.request

    def meter(self, *, streaming: bool) -> TurnMeter:
        return TurnMeter(
            api=API,
            model=self.request.model,
            tenant=self.context.tenant_id,
            history_items=0,
            streaming=streaming,
        )


def prepare_message(
    caller: Caller,
    request: MessagesRequest,
    *,
    version: str,
    beta: str | None,
    client_session_id: str | None,
) -> PreparedMessage:
    session_id, source = resolve_stateless_session(
        tenant_id=caller.tenant_id,
        client_session_id=client_session_id,
        user_id=request.user_id,
        first_items=request.session_items(),
    )
    headers = {**forwarded_headers(version, beta), "X-Session-ID": session_id}
    return PreparedMessage(
        context=MessageContext(caller.tenant_id, request, session_id, source),
        body=request.upstream_body(caller.cache_salt),
        headers=headers,
    )


async def create_message(services: Runtime, turn: PreparedMessage) -> bytes:
    """One JSON answer: the upstream's bytes, relayed as they came. Upstream refusals are
    raised as ``ApiError`` (their status kept for 4xx)."""
    meter = turn.meter(streaming=False)
    try:
        try:
            raw, answer = await services.upstream.create_message(turn.body, turn.headers)
        except UpstreamInterrupted:
            # The request reached the model and its answer was lost: a failed turn.
            meter.upstream_done()
            await settle(services, turn.context, meter, MessageOutcome())
            raise
        meter.upstream_done()
        outcome = MessageOutcome()
        outcome.answered(answer)
        await settle(services, turn.context, meter, outcome)
        return raw
    finally:
        meter.close()


async def count_message_tokens(services: Runtime, turn: PreparedMessage) -> bytes:
    """The upstream's exact count of the request's input tokens (its own tokenizer and
    chat template), relayed as it came; nothing is generated or stored."""
    raw, answer = await services.upstream.count_message_tokens(turn.body, turn.headers)
    count = answer.get("input_tokens")
    if isinstance(count, bool) or not isinstance(count, int):
        raise UpstreamError("The model server did not report the request's input tokens.")
    return raw
