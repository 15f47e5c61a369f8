"""One upstream round: a request to the model server, its answer checked, and the one
rule for how it fails.

Every turn's rounds run here: the plain turn's one round (``turns/kinds/plain.py``), each
round of the tool loop (``turns/kinds/tool_loop.py``) and compaction's summary request
(``turns/kinds/compaction.py``).
A round is streamed (its events relayed as they come) when someone consumes events as
they come, else one JSON call. The rule:

- refused before the turn began (the client's stream not started, no round answered,
  no tool run; ``TurnInProgress.begun``): the refusal is raised as it is, a plain error
  (4xx keep their status, connect errors 502, timeouts 504), and nothing is stored;
- any failure after that: a stream that breaks or ends early, an answer lost on its way
  back (``UpstreamInterrupted``: the model ran), a malformed answer
  (``wire/upstream_answer.py``), a model that reports a failure: the round returns the
  failure, which its kind of turn hands on to ``turns/runner/finish.py:end_turn``: the
  turn is stored as failed and the stream ends with ``error`` + ``response.failed``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import orjson
from opentelemetry.trace import SpanKind

from agentic_api import tracing
from agentic_api.errors import ApiError, UpstreamError
from agentic_api.turns.runner.delta_splice import DeltaTemplate
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.placing import answered_tokens
from agentic_api.turns.runner.relay import TEXT_DELTA, StreamRelay
from agentic_api.upstream.client import UpstreamClient
from agentic_api.upstream.errors import UpstreamInterrupted
from agentic_api.upstream.sse import SseEvent
from agentic_api.wire.upstream_answer import EventCheck, final_problem, surely_shallow


async def upstream_round(
    run: TurnInProgress,
    body: bytes,
    on_event: Callable[[dict[str, Any]], None],
    *,
    relays_as_is: bool = False,
) -> ApiError | None:
    """Sends ``body`` and returns once the round's answer is whole: None when it is well
    formed (the relay then holds its final object), else the failure to store. ``on_event``
    gets each streamed event (it relays what the client should see). ``relays_as_is``:
    ``on_event`` emits every event as ``StreamRelay.translate`` makes it, so a text delta
    may skip it and be spliced as bytes (``turns/runner/delta_splice.py``). Raises the
    refusal (see the module)."""
    model = run.turn.request.model
    with tracing.span(f"chat {model}", kind=SpanKind.CLIENT) as traced:
        tracing.record_request(
            traced, model, run.turn.request.conversation_id or run.turn.lineage.session_id
        )
        tracing.record_input(traced, body)
        headers = tracing.with_traceparent(run.turn.headers)
        target = await run.placer.target()
        while True:
            try:
                failure = await _round(run, target.client, body, on_event, headers, relays_as_is)
                break
            except ApiError as exc:
                # Refused before any byte reached the client: once per turn, the rule's
                # next-best replica (turns/runner/placing.py).
                retry = run.placer.after_refusal(target, exc)
                if retry is None:
                    raise
                target = retry
        if failure is None:
            run.placer.answered(target, answered_tokens(run.relay.upstream_final))
        tracing.record_response(traced, run.relay.upstream_final)
        return failure


async def _round(
    run: TurnInProgress,
    upstream: UpstreamClient,
    body: bytes,
    on_event: Callable[[dict[str, Any]], None],
    headers: Mapping[str, str],
    relays_as_is: bool,
) -> ApiError | None:
    relay = run.relay
    failure: ApiError | None = None
    if run.streaming:
        accepted = False
        try:
            async with upstream.stream_response(body, headers) as stream:
                accepted = True
                run.accepted()
                run.show_start_early()
                with run.events_batched() as flush:
                    spliced = run.emit_json if relays_as_is else None
                    failure = await pump(stream.event_batches(), relay, on_event, flush, spliced)
        except ApiError as exc:
            if not accepted and not run.begun:
                raise
            failure = exc
        # A stream that ended before its first event still opens before it fails.
        run.show_start({})
    else:
        try:
            relay.upstream_final = await upstream.create_response(body, headers)
        except UpstreamInterrupted as exc:
            # The request reached the model server and was lost on the way back: the
            # turn happened, and failed.
            failure = exc
        except ApiError as exc:
            if not run.begun:
                raise
            failure = exc
    run.worked = True
    return failure if failure is not None else upstream_outcome_error(relay)


async def pump(
    upstream_batches: AsyncIterator[list[SseEvent]],
    relay: StreamRelay,
    handle: Callable[[dict[str, Any]], None],
    flush: Callable[[], None] | None = None,
    spliced: Callable[[bytes, int], None] | None = None,
) -> ApiError | None:
    """Feeds each decoded upstream event to ``handle`` until the upstream's terminal
    event or error (which the relay keeps); returns the transport's failure, if any.
    ``flush`` is called after each batch (what one socket read brought): the events
    ``handle`` published for it go to the client together. ``spliced``: ``handle``
    relays every event as is; a text delta that matches the last one's template
    (``turns/runner/delta_splice.py``) goes there instead, as our JSON and its sequence
    number."""
    problem_of = EventCheck().problem
    template: DeltaTemplate | None = None
    try:
        async for batch in upstream_batches:
            for sse in batch:
                data = sse.data
                if template is not None and spliced is not None:
                    ours = template.splice(data, relay)
                    if ours is not None:
                        spliced(*ours)
                        continue
                if data == b"[DONE]":
                    return None
                try:
                    parsed = orjson.loads(data)
                except orjson.JSONDecodeError:
                    return invalid_answer("an event is not valid JSON")
                problem = problem_of(parsed, shallow=surely_shallow(data))
                if problem is not None:
                    return invalid_answer(problem)
                handle(parsed)
                if spliced is not None and parsed["type"] == TEXT_DELTA:
                    template = DeltaTemplate.learn(data, parsed, relay) or template
                if relay.upstream_final is not None or relay.upstream_error is not None:
                    return None
            if flush is not None:
                flush()
    except ApiError as exc:
        return exc
    return None


def invalid_answer(problem: str) -> ApiError:
    """The model server's answer is not a well-formed response: the turn fails (and is
    stored as failed), it never becomes a checkpoint."""
    # The problem may quote what the upstream sent: keep it short.
    shown = problem if len(problem) <= 300 else problem[:300] + "…"
    return UpstreamError(
        f"The model server's answer is not a valid response: {shown}.",
        code="upstream_invalid_response",
    )


def upstream_outcome_error(relay: StreamRelay) -> ApiError | None:
    """What is wrong with the round's outcome (an error event, no final object, a
    malformed one, a model that failed), or None."""
    if relay.upstream_error is not None:
        message = relay.upstream_error.get("message") or "the model server reported an error"
        return UpstreamError(f"The model server failed mid-stream: {message}")
    final = relay.upstream_final
    if final is None:
        return UpstreamError(
            "The model server's stream ended before the response was complete.",
            code="upstream_stream_interrupted",
        )
    problem = final_problem(final)
    if problem is not None:
        return invalid_answer(problem)
    if final.get("status") == "failed":
        error = final.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else None
        return UpstreamError(f"The model failed: {message or 'no reason given'}")
    return None
