"""Play one generation request's behavior on the wire.

This is a raw ASGI response rather than Starlette's ``StreamingResponse`` because the
simulator must notice a client that goes away at *any* moment (during the initial
delay, mid-stream, or while hanging without having sent a byte) to record the request
as aborted, and must be able to drop the TCP connection itself. A watcher task reads
``receive()`` until ``http.disconnect`` while the work runs beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .behaviors import (
    Behavior,
    Content,
    Disconnect,
    Fail,
    Hang,
    Malformed,
    Reply,
    StreamError,
    content_of,
    event_delay_of,
)
from .errors import error_bytes, internal_error_type
from .generation import Generation, default_reply, generate
from .kv_events import reports_reuse, session_of
from .render import Rendered
from .state import RecordedRequest, SimState

# The client of a connection, as uvicorn reports it in scope["client"].
Client = tuple[str, int] | None
# A held stream (``Reply.hold``) goes on after this long even if never released, so a
# test that fails before releasing it cannot leave a thread waiting forever.
HOLD_LIMIT_SECONDS = 30.0


class Runtime:
    """Per-server hooks that the ASGI app needs from the process that runs it."""

    def __init__(self, state: SimState) -> None:
        self.state = state
        # Set by whoever runs uvicorn: closes the TCP connection of a client.
        self.close_connection: Callable[[Client], bool] = lambda client: False
        # Set (from the loop thread) when the server stops, to release hanging requests.
        self.stopping = asyncio.Event()


@dataclass(frozen=True)
class StreamPlan:
    frames: list[bytes]
    # Index of the first frame that ends the stream (Disconnect/Hang/StreamError never
    # get past it, so the client never sees a terminal event).
    terminal_index: int
    # Builds the error frame(s) a StreamError sends in place of frame ``seq``.
    error_frames: Callable[[int, str, str], list[bytes]]


# Renders the JSON body of a complete non-streaming reply.
JsonRenderer = Callable[[Generation, int], bytes]
# Renders the SSE frames of a streaming reply.
StreamRenderer = Callable[[Generation, int], StreamPlan]

JSON_HEADERS = {"content-type": "application/json"}
SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}


class Shaper(Protocol):
    """Renders one request's reply in the shape of its API."""

    def json_body(self, gen: Generation, cached: int) -> bytes: ...

    def stream_plan(self, gen: Generation, cached: int) -> StreamPlan: ...


def open_exchange(
    runtime: Runtime,
    rec: RecordedRequest,
    body: Mapping[str, Any],
    *,
    behavior: Behavior,
    rendered: Rendered,
    prompt: list[int],
    salt: str | None,
    max_tokens: int,
    response_id: str,
    shaper: Shaper,
) -> Exchange:
    """The exchange of a validated request, whatever its API: it plays the behavior's
    content (an echo of the prompt when it has none), and the request is recorded with its
    prompt, stream flag and id before anything is played."""
    content = content_of(behavior) or default_reply(rendered, runtime.state.config)
    stream = bool(body.get("stream"))
    runtime.state.update(
        rec,
        behavior=behavior,
        stream=stream,
        prompt_text=rendered.text,
        prompt_tokens=len(prompt),
        response_id=response_id,
    )
    return Exchange(
        runtime=runtime,
        rec=rec,
        behavior=behavior,
        content=content,
        stream=stream,
        prompt_tokens=prompt,
        salt=salt,
        max_tokens=max_tokens,
        render_json=shaper.json_body,
        render_stream=shaper.stream_plan,
    )


def _raw_json(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    return body.encode() if isinstance(body, str) else orjson.dumps(body)


def _raw_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def send_bytes(send: Send, status: int, body: bytes, headers: Mapping[str, str]) -> None:
    all_headers = {**headers, "content-length": str(len(body))}
    await send(
        {"type": "http.response.start", "status": status, "headers": _raw_headers(all_headers)}
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class Exchange(Response):
    """The ASGI response for a validated generation request."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        rec: RecordedRequest,
        behavior: Behavior,
        content: Content,
        stream: bool,
        prompt_tokens: list[int],
        salt: str | None,
        max_tokens: int,
        render_json: JsonRenderer,
        render_stream: StreamRenderer,
    ) -> None:
        super().__init__(status_code=200)
        self.runtime = runtime
        self.state = runtime.state
        self.rec = rec
        self.behavior = behavior
        self.content = content
        self.stream = stream
        self.prompt_tokens = prompt_tokens
        self.salt = salt
        # vLLM labels the KV events of this request with it.
        self.session_id = session_of(rec.json, rec.headers)
        self.max_tokens = max_tokens
        self.render_json = render_json
        self.render_stream = render_stream
        self._client: Client = None
        self._gone = asyncio.Event()
        self._closed_by_us = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._client = scope.get("client")
        watcher = asyncio.create_task(self._watch(receive))
        work = asyncio.create_task(self._work(send))
        gone = asyncio.create_task(self._gone.wait())
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
                if not self._closed_by_us:
                    self.state.finish(self.rec, "aborted")
            else:
                failure = work.exception()
                if failure is not None:
                    raise failure
        finally:
            for task in (watcher, gone, work):
                task.cancel()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._gone.set()
                return

    # --- the behavior -------------------------------------------------------------

    async def _work(self, send: Send) -> None:
        behavior = self.behavior
        config = self.state.config
        await asyncio.sleep(behavior.delay)

        if isinstance(behavior, Fail):
            await self._send_failure(send, behavior)
            return

        # Prefill: the prompt's blocks are computed (and cached) from here on, even if
        # the request never completes.
        cached = self.state.cache_lookup_and_fill(
            self.prompt_tokens, self.salt, self.session_id, reports_reuse(self.rec.json)
        )
        self.state.update(self.rec, prompt_tokens=len(self.prompt_tokens), cached_tokens=cached)
        uncached = len(self.prompt_tokens) - cached

        if not self.stream:
            await asyncio.sleep(config.prefill_seconds_per_token * uncached)
            await self._play_json(send, cached)
        else:
            # Like vLLM, a streaming response sends its headers as soon as the request
            # is scheduled, before the first token exists.
            await send(
                {"type": "http.response.start", "status": 200, "headers": _raw_headers(SSE_HEADERS)}
            )
            self.state.update(self.rec, status=200)
            await asyncio.sleep(config.prefill_seconds_per_token * uncached)
            if isinstance(behavior, Reply) and behavior.hold is not None:
                # The test's thread sets it; waiting in a thread keeps this loop serving.
                await asyncio.to_thread(behavior.hold.wait, HOLD_LIMIT_SECONDS)
            await self._play_stream(send, cached)

    async def _play_json(self, send: Send, cached: int) -> None:
        behavior = self.behavior
        if isinstance(behavior, Malformed):
            self.state.finish(self.rec, "malformed", status=200)
            await send_bytes(send, 200, _raw_json(behavior.body), JSON_HEADERS)
            return
        if isinstance(behavior, Disconnect):
            await self._drop_connection()
            return
        if isinstance(behavior, Hang):
            await self._hang_until_shutdown()
            return
        if isinstance(behavior, StreamError):
            body = error_bytes(behavior.message, "InternalServerError", 500)
            self.state.finish(self.rec, "failed", status=500)
            await send_bytes(send, 500, body, JSON_HEADERS)
            return
        gen = generate(self.content, self.max_tokens)
        self.state.update(self.rec, output_tokens=gen.output_tokens)
        await asyncio.sleep(self.state.config.decode_seconds_per_token * gen.output_tokens)
        body = self.render_json(gen, cached)
        self._commit(gen)
        await send_bytes(send, 200, body, JSON_HEADERS)

    async def _play_stream(self, send: Send, cached: int) -> None:
        behavior = self.behavior
        if isinstance(behavior, Malformed):
            for index, event in enumerate(behavior.events):
                if index and behavior.event_delay:
                    await asyncio.sleep(behavior.event_delay)
                if isinstance(event, bytes):
                    data = event
                else:
                    data = event.encode() if isinstance(event, str) else orjson.dumps(event)
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + data + b"\n\n",
                        "more_body": True,
                    }
                )
            self.state.finish(self.rec, "malformed", status=200)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        gen = generate(self.content, self.max_tokens)
        self.state.update(self.rec, output_tokens=gen.output_tokens)
        plan = self.render_stream(gen, cached)
        stop_at: int | None = None
        if isinstance(behavior, Disconnect | Hang | StreamError):
            stop_at = min(behavior.after_events, plan.terminal_index)
        decode_per_event = (
            self.state.config.decode_seconds_per_token * gen.output_tokens / len(plan.frames)
        )
        event_delay = event_delay_of(behavior) + decode_per_event

        for index, frame in enumerate(plan.frames):
            if index == stop_at:
                await self._stop_stream(send, behavior, plan, index)
                return
            if index and event_delay:
                await asyncio.sleep(event_delay)
            if index == plan.terminal_index:
                self._commit(gen)
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            self.state.update(self.rec, events_sent=index + 1)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stop_stream(
        self, send: Send, behavior: Behavior, plan: StreamPlan, index: int
    ) -> None:
        if isinstance(behavior, Disconnect):
            await self._drop_connection()
        elif isinstance(behavior, Hang):
            await self._hang_until_shutdown()
        elif isinstance(behavior, StreamError):
            self.state.finish(self.rec, "error_event")
            for frame in plan.error_frames(index, behavior.message, behavior.code):
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_failure(self, send: Send, fail: Fail) -> None:
        headers = {**JSON_HEADERS, **fail.headers}
        if fail.body is None:
            body = error_bytes(fail.message, internal_error_type(fail.status), fail.status)
        elif isinstance(fail.body, bytes):
            body = fail.body
        elif isinstance(fail.body, str):
            body = fail.body.encode()
        else:
            body = orjson.dumps(dict(fail.body))
        self.state.finish(self.rec, "failed", status=fail.status)
        await send_bytes(send, fail.status, body, headers)

    def _commit(self, gen: Generation) -> None:
        # Called just *before* the last bytes go out, so that a test (or the next turn)
        # that has seen the end of the response always finds it recorded and cached.
        # Decoding fills blocks too: the next turn can reuse prompt + generated tokens.
        self.state.cache_insert(self.prompt_tokens + gen.token_ids, self.salt, self.session_id)
        self.state.finish(self.rec, "incomplete" if gen.truncated else "completed", status=200)

    async def _drop_connection(self) -> None:
        self._closed_by_us = True
        self.state.finish(self.rec, "disconnected")
        if not self.runtime.close_connection(self._client):
            # No handle on the socket (foreign server): an exception makes uvicorn close
            # it once the response has started.
            raise ConnectionAbortedError("upstream simulator dropped the connection")
        await self._await_gone()

    async def _hang_until_shutdown(self) -> None:
        await self.runtime.stopping.wait()
        self._closed_by_us = True
        self.state.finish(self.rec, "shutdown")
        if self.runtime.close_connection(self._client):
            await self._await_gone()

    async def _await_gone(self) -> None:
        # Return only once uvicorn has seen the connection go, or it would try to
        # answer a request that "never got a response" with a 500.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._gone.wait(), timeout=2.0)
