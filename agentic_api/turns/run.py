"""Running a prepared turn: one streamed upstream request, relayed, then committed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from agentic_api.errors import ApiError, UpstreamError
from agentic_api.log import get_logger
from agentic_api.metrics import TurnMeter
from agentic_api.services import Services
from agentic_api.turns.channel import TurnChannel
from agentic_api.turns.commit import commit_turn
from agentic_api.turns.prepare import PreparedTurn
from agentic_api.turns.relay import StreamRelay
from agentic_api.turns.render import streams_upstream
from agentic_api.upstream.errors import UpstreamInterrupted
from agentic_api.wire.items import to_item
from agentic_api.wire.response_object import finish_response, normalize_usage

log = get_logger("agentic_api.turns.run")


class TurnFailed(Exception):
    """The model run failed after the stream had started; carries the failed object."""

    def __init__(self, response: dict[str, Any], error: ApiError) -> None:
        super().__init__(error.message)
        self.response = response
        self.error = error


async def run_turn(
    services: Services, turn: PreparedTurn, channel: TurnChannel | None = None
) -> dict[str, Any]:
    """Runs the turn to its end and returns the final Response object.

    Raises ``ApiError`` if the upstream refused the request before streaming (nothing
    is stored) and ``TurnFailed`` if it failed midway (the failure is stored).
    """
    relay = StreamRelay(turn.base)
    record = turn.records_events
    events: list[dict[str, Any]] = []

    meter = TurnMeter(
        model=turn.request.model,
        tenant=turn.caller.tenant_id,
        history_items=len(turn.history),
        streaming=channel is not None,
    )

    def emit(event: dict[str, Any]) -> None:
        meter.event(event)
        if record:
            events.append(event)
        if channel is not None:
            channel.publish(event)

    try:
        if not streams_upstream(turn.request):
            return meter.finished(await _run_unstreamed(services, turn, relay, emit, events, meter))
        try:
            async with services.upstream.stream_response(turn.body, turn.headers) as stream:
                if channel is not None:
                    channel.opened()
                for event in relay.opening_events():
                    emit(event)
                failure = await _relay(stream.events(), relay, emit)
            meter.upstream_done()
        except ApiError as exc:
            if not relay.opened:
                if channel is not None:
                    channel.failed_to_open(exc)
                raise
            failure = exc
        if failure is None:
            failure = _upstream_outcome_error(relay)
        if failure is not None:
            return await _fail(services, turn, relay, emit, events, failure)
        return meter.finished(await _complete(services, turn, relay, emit, events))
    except TurnFailed as failed:
        meter.finished(failed.response)
        raise
    finally:
        meter.close()
        if channel is not None:
            channel.close()


async def _run_unstreamed(
    services: Services,
    turn: PreparedTurn,
    relay: StreamRelay,
    emit: Callable[[dict[str, Any]], None],
    events: list[dict[str, Any]],
    meter: TurnMeter,
) -> dict[str, Any]:
    """One JSON request and one JSON answer, for clients that wait for the whole object."""
    try:
        relay.upstream_final = await services.upstream.create_response(turn.body, turn.headers)
        meter.upstream_done()
    except UpstreamInterrupted as exc:
        meter.upstream_done()
        # The request reached the model server and was lost on the way back: the turn
        # happened, and failed.
        return await _fail(services, turn, relay, emit, events, exc)
    failure = _upstream_outcome_error(relay)
    if failure is not None:
        return await _fail(services, turn, relay, emit, events, failure)
    return await _complete(services, turn, relay, emit, events)


async def _relay(
    upstream_events: Any, relay: StreamRelay, emit: Callable[[dict[str, Any]], None]
) -> ApiError | None:
    try:
        async for sse in upstream_events:
            if sse.data == "[DONE]":
                break
            try:
                parsed = orjson.loads(sse.data)
            except orjson.JSONDecodeError:
                return UpstreamError("The model server sent an undecodable event.")
            if not isinstance(parsed, dict):
                continue
            ours = relay.translate(parsed)
            if ours is not None:
                emit(ours)
            if relay.upstream_final is not None or relay.upstream_error is not None:
                break
    except ApiError as exc:
        return exc
    return None


def _upstream_outcome_error(relay: StreamRelay) -> ApiError | None:
    if relay.upstream_error is not None:
        message = relay.upstream_error.get("message") or "the model server reported an error"
        return UpstreamError(f"The model server failed mid-stream: {message}")
    final = relay.upstream_final
    if final is None:
        return UpstreamError(
            "The model server's stream ended before the response was complete.",
            code="upstream_stream_interrupted",
        )
    if final.get("status") == "failed":
        error = final.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else None
        return UpstreamError(f"The model failed: {message or 'no reason given'}")
    return None


async def _complete(
    services: Services,
    turn: PreparedTurn,
    relay: StreamRelay,
    emit: Callable[[dict[str, Any]], None],
    events: list[dict[str, Any]],
) -> dict[str, Any]:
    upstream = relay.upstream_final or {}
    status = "incomplete" if upstream.get("status") == "incomplete" else "completed"
    output = relay.final_output()
    final = finish_response(
        turn.base,
        status=status,
        output=output,
        usage=normalize_usage(upstream.get("usage")),
        completed_at=int(time.time()),
        upstream=upstream,
        incomplete_details=upstream.get("incomplete_details") if status == "incomplete" else None,
    )
    terminal = relay.stamp({"type": f"response.{status}", "response": final})
    if turn.request.store:
        try:
            await commit_turn(
                services.db,
                turn,
                final,
                [to_item(item) for item in output],
                [*events, terminal] if turn.records_events else None,
            )
        except ApiError as refused:
            # A typed refusal (a conversation that moved on, a busy database) reaches the
            # client as it is; the transaction rolled back, so nothing was stored.
            log.warning("commit refused", response_id=turn.response_id, code=refused.code)
            emit(relay.stamp(_error_event(refused)))
            raise
        except Exception as exc:
            log.exception("commit failed", response_id=turn.response_id)
            error = ApiError(
                "The response could not be saved; it was not stored and cannot be continued.",
                status_code=500,
                code="commit_failed",
            )
            emit(relay.stamp(_error_event(error)))
            raise error from exc
    emit(terminal)
    return final


async def _fail(
    services: Services,
    turn: PreparedTurn,
    relay: StreamRelay,
    emit: Callable[[dict[str, Any]], None],
    events: list[dict[str, Any]],
    failure: ApiError,
) -> dict[str, Any]:
    log.warning("turn failed", response_id=turn.response_id, reason=failure.message)
    final = finish_response(
        turn.base,
        status="failed",
        output=[],
        usage=None,
        completed_at=None,
        error={"code": failure.code or "server_error", "message": failure.message},
    )
    error_event = relay.stamp(_error_event(failure))
    emit(error_event)
    terminal = relay.stamp({"type": "response.failed", "response": final})
    if turn.request.store:
        try:
            await commit_turn(
                services.db, turn, final, [], [*events, terminal] if turn.records_events else None
            )
        except Exception:
            log.exception("could not record the failed response", response_id=turn.response_id)
    emit(terminal)
    raise TurnFailed(final, failure)


def _error_event(error: ApiError) -> dict[str, Any]:
    return {"type": "error", "code": error.code, "message": error.message, "param": error.param}


async def run_without_model(services: Services, turn: PreparedTurn) -> list[dict[str, Any]]:
    """``generate: false``: record the turn's input as a checkpoint to chain from, without
    calling the model. Returns the events to send (created, then completed)."""
    relay = StreamRelay(turn.base)
    created = relay.stamp({"type": "response.created", "response": dict(turn.base)})
    final = finish_response(
        turn.base,
        status="completed",
        output=[],
        usage=normalize_usage(None),
        completed_at=int(time.time()),
    )
    completed = relay.stamp({"type": "response.completed", "response": final})
    if turn.request.store:
        await commit_turn(services.db, turn, final, [], [created, completed])
    return [created, completed]
