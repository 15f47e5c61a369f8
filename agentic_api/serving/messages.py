"""``POST /v1/messages``: an Anthropic Messages turn, answered whole or streamed."""

from __future__ import annotations

from agentic_api.messages.stream import MessageStream, open_message_stream
from agentic_api.messages.turn import PreparedMessage, create_message
from agentic_api.runtime import Services


async def answer_message(services: Services, turn: PreparedMessage) -> bytes | MessageStream:
    """The JSON answer's bytes, or the stream, its upstream request accepted."""
    if turn.request.stream:
        return await open_message_stream(services, turn)
    return await create_message(services, turn)
