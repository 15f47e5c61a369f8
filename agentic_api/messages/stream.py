"""A streamed Anthropic Messages turn: the upstream's events relayed as they come.

The upstream request runs in a task of its own (``Runtime.spawn``) that owns it from
start to end and hands framed events to the client's response through a queue, as a
streamed Responses turn does: a client that leaves does not cut the turn off unless the
operator chose ``AGENTIC_STREAM_DISCONNECT=cancel``, and the upstream connection is
closed whatever happens to the client's. The events are relayed unchanged
(``message_start``, ``content_block_*``, ``message_delta``, ``message_stop``; ``ping``
and ``error`` as well); the relay only reads the usage, the stop reason and the message
id from them. The outcome is settled (counted, recorded) before ``message_stop`` is
passed on, so a client that saw the end finds the record there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from agentic_api.errors import ApiError, UpstreamError
from agentic_api.messages.outcome import MessageOutcome, settle
from agentic_api.messages.turn import PreparedMessage
from agentic_api.metrics import TurnMeter
from agentic_api.runtime import Runtime
from agentic_api.wire.anthropic import error_body
from agentic_api.wire.sse import frame_sse

_OPENED = object()
_CLOSED = object()


class MessageStream:
    def __init__(self, services: Runtime, turn: PreparedMessage) -> None:
        self._services = services
        self._turn = turn
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._cancel_on_disconnect = services.settings.stream_disconnect == "cancel"
        self._task = services.spawn(self._run())

    async def wait_opened(self) -> None:
        """Returns once the upstream accepted the request; raises its refusal."""
        first = await self._queue.get()
        if isinstance(first, BaseException):
            raise first
        if first is _CLOSED:
            raise RuntimeError("the message stream ended before the upstream answered")

    async def frames(self) -> AsyncIterator[bytes]:
        """The SSE frames to send, as they come."""
        finished = False
        try:
            while (item := await self._queue.get()) is not _CLOSED:
                yield item
            finished = True
        finally:
            # Reaching here early means the client left (AGENTIC_STREAM_DISCONNECT).
            if not finished and self._cancel_on_disconnect and not self._task.done():
                self._task.cancel()

    async def _run(self) -> None:
        turn = self._turn
        meter = turn.meter(streaming=True)
        outcome = MessageOutcome()
        opened = settled = errored = False
        try:
            async with self._services.upstream.stream_message(turn.body, turn.headers) as up:
                opened = True
                self._queue.put_nowait(_OPENED)
                try:
                    async for event in up.events():
                        name = event.event or "message"
                        # Relayed as text, as before the decoder kept bytes: bytes that
                        # are not UTF-8 reach the client replaced.
                        data = event.data.decode("utf-8", "replace")
                        if name == "message_stop":
                            meter.upstream_done()
                            if errored:
                                outcome.status = "failed"
                            elif outcome.stop_reason is None:
                                outcome.status = "completed"
                            settled = True
                            await settle(self._services, turn.context, meter, outcome)
                        else:
                            errored = _read(name, data, outcome, meter) or errored
                        self._queue.put_nowait(frame_sse(name, data.encode()))
                except UpstreamError as exc:
                    # The connection broke mid-stream: end the client's stream the way
                    # Anthropic's API reports an error after the headers were sent.
                    self._queue.put_nowait(_error_frame(exc))
                    errored = True
            if not settled:
                if not errored:
                    lost = UpstreamError("The model server's stream ended before message_stop.")
                    self._queue.put_nowait(_error_frame(lost))
                meter.upstream_done()
                outcome.status = "failed"
                settled = True
                await settle(self._services, turn.context, meter, outcome)
        except ApiError as exc:
            if opened:
                raise
            # Refused before streaming: the client gets a plain HTTP error, nothing ran.
            self._queue.put_nowait(exc)
        except asyncio.CancelledError:
            if opened and not settled:
                outcome.status = "cancelled"
                meter.upstream_done()
                await settle(self._services, turn.context, meter, outcome)
            raise
        finally:
            self._queue.put_nowait(_CLOSED)
            meter.close()


async def open_message_stream(services: Runtime, turn: PreparedMessage) -> MessageStream:
    """Starts the turn; returns once the upstream accepted it (raises its refusal)."""
    stream = MessageStream(services, turn)
    await stream.wait_opened()
    return stream


def _read(name: str, data: str, outcome: MessageOutcome, meter: TurnMeter) -> bool:
    """Takes what the outcome needs from one event; True for an ``error`` event."""
    if name == "error":
        return True
    if name == "content_block_delta":
        meter.first_token()
        return False
    if name not in ("message_start", "message_delta"):
        return False
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(event, dict):
        return False
    if name == "message_start" and isinstance(event.get("message"), dict):
        outcome.answered(event["message"])
    elif name == "message_delta":
        delta = event.get("delta")
        if isinstance(delta, dict):
            outcome.stopped(delta.get("stop_reason"))
        outcome.usage.merge(event.get("usage"))
    return False


def _error_frame(error: ApiError) -> bytes:
    return frame_sse("error", orjson.dumps(error_body(error)))
