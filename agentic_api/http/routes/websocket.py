"""``GET /v1/responses`` upgraded to a WebSocket: Codex's transport.

Client frames are ``response.create`` (the create body, streamed implicitly); each
``stream_id`` names a lane whose requests run one at a time, in order. Server frames are
the SSE events, with ``stream_id`` echoed. Unknown client frame types are ignored.

The handshake's key is authenticated again for every ``response.create`` and
``response.inject``, through the same key memo as HTTP (``KEY_MEMO_SECONDS``), so the
admin's revocation, disable and salt rotation reach an open connection within that bound:
a refused key ends the connection (an ``error`` frame, then close code 1008) and nothing
it asked is done (an inject delivers nothing); a new salt is the next turn's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from agentic_api import tracing
from agentic_api.errors import ApiError, InvalidRequest, PayloadTooLarge, Unauthorized
from agentic_api.http.auth import authenticate, credential_header, services_of
from agentic_api.http.json_response import JsonResponse
from agentic_api.log import get_logger
from agentic_api.runtime import Runtime
from agentic_api.serving.socket_turn import (
    ConnectionHistories,
    InjectionRefused,
    Injections,
    start_socket_turn,
)
from agentic_api.serving.tenants import TenantContext, caller_of
from agentic_api.wire.events import socket_error_frame, socket_event
from agentic_api.wire.multi_agent import inject_failed, socket_beta
from agentic_api.wire.requests import parse_create_request

router = APIRouter(tags=["responses"])
log = get_logger("agentic_api.websocket")

# Documented per-connection limits.
MAX_LANES = 16
MAX_QUEUED_PER_LANE = 8
DEFAULT_LANE = ""
# RFC 6455's "policy violation": the connection's credentials are no longer accepted.
CLOSE_CREDENTIALS_REFUSED = 1008


@dataclass
class Lane:
    queue: asyncio.Queue[dict[str, Any]]
    worker: asyncio.Task[None] | None = None


@dataclass
class Session:
    websocket: WebSocket
    services: Runtime
    # The handshake's Authorization header, authenticated again for every request.
    authorization: str | None = field(repr=False)
    # The handshake's W3C trace context: each turn's span is its child (empty, untraced).
    trace_carrier: dict[str, str] = field(default_factory=dict)
    local: ConnectionHistories = field(default_factory=ConnectionHistories)
    lanes: dict[str, Lane] = field(default_factory=dict)
    # Multi-agent responses running on this connection, by id: where response.inject
    # frames go; and the latest ones that ended (an inject for them is answered
    # response_already_completed).
    running: dict[str, Injections] = field(default_factory=dict)
    ended: deque[str] = field(default_factory=lambda: deque(maxlen=64))
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False

    async def send(self, frame: dict[str, Any]) -> None:
        if self.closed:
            return
        async with self.send_lock:
            try:
                await self.websocket.send_text(orjson.dumps(frame).decode())
            except (WebSocketDisconnect, RuntimeError):
                self.closed = True

    async def send_error(self, error: ApiError, stream_id: str | None) -> None:
        await self.send(socket_error_frame(error, stream_id))

    async def close(self, code: int, reason: str) -> None:
        """Ends the connection once; frames already sent go first."""
        async with self.send_lock:
            if self.closed:
                return
            self.closed = True
            # The client may have left first: then there is nothing to close.
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await self.websocket.close(code=code, reason=reason)


@router.websocket("/v1/responses")
async def responses_socket(websocket: WebSocket) -> None:
    services = services_of(websocket)
    try:
        authorization = credential_header(websocket)
        await authenticate(services, websocket.app.state.key_memo, authorization)
    except ApiError as exc:
        await websocket.send_denial_response(JsonResponse(exc.body(), status_code=exc.status_code))
        return
    await websocket.accept()
    session = Session(
        websocket,
        services,
        authorization,
        trace_carrier=tracing.client_carrier(websocket.scope["headers"]),
    )
    lifetime = services.settings.ws_max_connection_seconds
    deadline = time.monotonic() + lifetime
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                await _close_for_lifetime(session, lifetime)
                return
            try:
                message = await asyncio.wait_for(websocket.receive(), timeout=remaining)
            except TimeoutError:
                continue
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None and message.get("bytes") is not None:
                raw = message["bytes"].decode("utf-8", "replace")
            limit = services.settings.max_body_bytes
            if raw is not None and len(raw) > limit:
                # The same bound as an HTTP body; the connection survives an oversized frame.
                await session.send_error(
                    PayloadTooLarge(f"A frame may be at most {limit} bytes."), None
                )
                continue
            await _dispatch(session, raw or "")
    finally:
        session.closed = True
        _stop_lanes(session)


async def _dispatch(session: Session, raw: str) -> None:
    try:
        frame = orjson.loads(raw)
    except orjson.JSONDecodeError:
        await session.send_error(
            InvalidRequest("The frame is not valid JSON.", code="invalid_frame"), None
        )
        return
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        await session.send_error(
            InvalidRequest("A frame must be a JSON object with a 'type'.", code="invalid_frame"),
            None,
        )
        return
    if frame["type"] == "response.inject":
        await _inject(session, frame)
        return
    if frame["type"] != "response.create":
        # Clients send acknowledgements such as response.processed; they need no answer.
        return
    stream_id = frame.get("stream_id")
    if stream_id is not None and not isinstance(stream_id, str):
        await session.send_error(
            InvalidRequest("'stream_id' must be a string.", param="stream_id"), None
        )
        return
    lane_key = stream_id if stream_id is not None else DEFAULT_LANE
    lane = session.lanes.get(lane_key)
    if lane is None:
        if len(session.lanes) >= MAX_LANES:
            await session.send_error(
                InvalidRequest(
                    f"At most {MAX_LANES} stream_id lanes per connection.",
                    param="stream_id",
                    code="too_many_lanes",
                ),
                stream_id,
            )
            return
        lane = Lane(asyncio.Queue(maxsize=MAX_QUEUED_PER_LANE))
        session.lanes[lane_key] = lane
        lane.worker = asyncio.create_task(_lane_worker(session, lane_key, lane))
    try:
        lane.queue.put_nowait(frame)
    except asyncio.QueueFull:
        await session.send_error(
            ApiError(
                f"At most {MAX_QUEUED_PER_LANE} requests may wait in one lane.",
                status_code=429,
                error_type="invalid_request_error",
                code="lane_queue_full",
            ),
            stream_id,
        )


async def _lane_worker(session: Session, lane_key: str, lane: Lane) -> None:
    while not session.closed:
        frame = await lane.queue.get()
        stream_id = frame.get("stream_id")
        try:
            # One server span per response.create, as ServerSpans gives each HTTP turn.
            with tracing.socket_turn(session.trace_carrier):
                await _serve_create(session, lane_key, frame, stream_id)
        except CredentialsRefused as refused:
            await session.send_error(refused.error, stream_id)
            await session.close(CLOSE_CREDENTIALS_REFUSED, "credentials no longer accepted")
        except ApiError as exc:
            await session.send_error(exc, stream_id)
        except Exception:
            log.exception("websocket request failed")
            await session.send_error(ApiError("The server had an error."), stream_id)


async def _serve_create(
    session: Session, lane_key: str, frame: dict[str, Any], stream_id: str | None
) -> None:
    # Who is asking, then what is asked (as over HTTP).
    tenant = await _current_tenant(session)
    body = {k: v for k, v in frame.items() if k not in ("type", "stream_id", "generate")}
    generate = frame.get("generate", True)
    if not isinstance(generate, bool):
        raise InvalidRequest("'generate' must be a boolean.", param="generate")
    if body.get("background"):
        raise InvalidRequest(
            "'background' is not allowed over the WebSocket.",
            param="background",
            code="unsupported_parameter",
        )
    body["stream"] = True
    request, _raw = parse_create_request(orjson.dumps(body), socket_beta(session.websocket.headers))
    started = await start_socket_turn(
        session.services,
        caller_of(tenant),
        request,
        histories=session.local,
        lane=lane_key,
        generate=generate,
    )
    if isinstance(started, list):
        for recorded in started:
            await session.send(socket_event(recorded, stream_id))
        return
    stream = started.stream
    next_event = stream.next_event
    response_id = stream.run.turn.response_id
    if started.injections is not None:
        session.running[response_id] = started.injections
    try:
        # Leaving early (the connection went away) applies the same rule as an HTTP stream.
        with stream:
            while (event := await next_event()) is not None:
                await session.send(socket_event(event, stream_id))
    finally:
        if session.running.pop(response_id, None) is not None:
            session.ended.append(response_id)
    await started.settle()


async def _inject(session: Session, frame: dict[str, Any]) -> None:
    """``response.inject``: the client's tool outputs for a multi-agent response running on
    this connection, acknowledged in its stream (``response.inject.created``); for a
    response not running here, ``response.inject.failed`` with the input back."""
    response_id, items = frame.get("response_id"), frame.get("input")
    stream_id = frame.get("stream_id") if isinstance(frame.get("stream_id"), str) else None
    # Who is asking first, as for response.create: a multi-agent response may wait for a
    # client for a long time, and what a key no longer accepted sends must not reach it.
    try:
        await _current_tenant(session)
    except CredentialsRefused as refused:
        await session.send_error(refused.error, stream_id)
        await session.close(CLOSE_CREDENTIALS_REFUSED, "credentials no longer accepted")
        return
    if not isinstance(response_id, str) or not isinstance(items, list):
        await session.send_error(
            InvalidRequest(
                "response.inject needs a 'response_id' string and an 'input' array.",
                param="response_id" if not isinstance(response_id, str) else "input",
                code="invalid_frame",
            ),
            stream_id,
        )
        return
    injections = session.running.get(response_id)
    if injections is None:
        ended = response_id in session.ended
        failed = inject_failed(
            response_id, "response_already_completed" if ended else "response_not_found", items
        )
        await session.send(socket_event(failed, stream_id))
        return
    try:
        injections.deliver(items)
    except InjectionRefused as refused:
        await session.send_error(InvalidRequest(str(refused), param="input"), stream_id)


class CredentialsRefused(Exception):
    """The connection's key is no longer accepted: the request is refused and the
    connection ends."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.message)
        self.error = error


async def _current_tenant(session: Session) -> TenantContext:
    """The connection's tenant as it is now (its salt epoch included)."""
    services = session.services
    try:
        return await authenticate(
            services, session.websocket.app.state.key_memo, session.authorization
        )
    except Unauthorized as exc:
        raise CredentialsRefused(
            Unauthorized(
                "The API key this connection was opened with is no longer accepted (it was "
                "revoked, or its tenant disabled); the connection is closed.",
                code=exc.code,
            )
        ) from exc


async def _close_for_lifetime(session: Session, lifetime: float) -> None:
    await session.send_error(
        ApiError(
            f"This connection reached its maximum lifetime of {int(lifetime)} s; reconnect.",
            status_code=400,
            error_type="invalid_request_error",
            code="websocket_connection_limit_reached",
        ),
        None,
    )
    await session.close(1000, "connection lifetime reached")


def _stop_lanes(session: Session) -> None:
    # Queued requests die with the connection; a turn already running finishes (or is
    # cancelled) by the same rule as an HTTP stream whose client left.
    for lane in session.lanes.values():
        if lane.worker is not None and not lane.worker.done():
            lane.worker.cancel()
