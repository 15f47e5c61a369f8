"""``POST /v1/messages``: an Anthropic Messages turn, answered whole or streamed."""

from __future__ import annotations

from agentic_api.services import Services
from agentic_api.turns.message_stream import MessageStream, open_message_stream
from agentic_api.turns.messages import PreparedMessage, create_message


async def answer_message(services: Services, turn: PreparedMessage) -> bytes | MessageStream:
    """The JSON answer's bytes, or the stream, its upstream request accepted."""
    if turn.request.stream:
        return await open_message_stream(services, turn)
    return await create_message(services, turn)
