"""``POST /v1/messages``: an Anthropic Messages turn, answered whole or streamed."""

from __future__ import annotations

from agentic_api.messages.stream import MessageStream, open_message_stream

# PreparedMessage is named again for the route, which prepares before it answers.
from agentic_api.messages.turn import PreparedMessage as PreparedMessage
from agentic_api.messages.turn import (
    count_message_tokens,
    create_message,
    prepare_message,
)
from agentic_api.runtime import Runtime
from agentic_api.serving.tenants import TenantContext, caller_of
from agentic_api.wire.anthropic import MessagesRequest


def prepare(
    tenant: TenantContext,
    request: MessagesRequest,
    *,
    version: str,
    beta: str | None,
    client_session_id: str | None,
) -> PreparedMessage:
    """The Messages turn as it will be sent: its session, salt, headers and body."""
    return prepare_message(
        caller_of(tenant),
        request,
        version=version,
        beta=beta,
        client_session_id=client_session_id,
    )


async def answer_message(services: Runtime, turn: PreparedMessage) -> bytes | MessageStream:
    """The JSON answer's bytes, or the stream, its upstream request accepted."""
    if turn.request.stream:
        return await open_message_stream(services, turn)
    return await create_message(services, turn)


async def count_tokens(services: Runtime, turn: PreparedMessage) -> bytes:
    """``POST /v1/messages/count_tokens``: the model server's count, relayed as it came."""
    return await count_message_tokens(services, turn)
