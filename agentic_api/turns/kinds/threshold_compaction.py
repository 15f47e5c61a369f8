"""Compaction by threshold: ``context_management: [{"type": "compaction",
"compact_threshold": N}]`` on ``POST /v1/responses`` (HTTP JSON, SSE, WebSocket,
background).

Before the model is called, the turn's input (its compacted window, see
``turns/prepare/summary_request.py:compacted_window``) is counted: exactly, with the
upstream's render endpoint when it has one (``upstream/capabilities.py``), else estimated
as the request's bytes / 4, and the log says which. Past N, the turn runs two rounds in one
response: the summary request of ``turns/kinds/compaction.py`` (output item 0, the
``compaction`` item, streamed as a compacting turn streams it), then the answer on the
compacted window (the item, the calls the new input's tool outputs answer, the new input),
whose items follow it. What is
stored is the turn's input and both outputs, so a continuation (``previous_response_id``
or a conversation) replays the item, and its window starts there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.runtime import Runtime
from agentic_api.turns.data.prepared import PreparedTurn
from agentic_api.turns.data.token_plan import TOKEN_IDS_FIELD
from agentic_api.turns.kinds.compaction import summarize
from agentic_api.turns.prepare.render import render_body
from agentic_api.turns.prepare.summary_request import compacted_window, summary_body
from agentic_api.turns.runner.finish import Completion, Ending
from agentic_api.turns.runner.in_progress import TurnInProgress
from agentic_api.turns.runner.round import upstream_round
from agentic_api.wire.items import Item, to_item
from agentic_api.wire.response_object import add_usage, normalize_usage

log = get_logger("agentic_api.turns.threshold_compaction")

# The estimate where the upstream cannot render (the Rust peer's rule): English and JSON
# run near 4 bytes a token with the tokenizers served here.
BYTES_PER_TOKEN = 4


@dataclass(frozen=True)
class ContextSize:
    tokens: int
    # "render": the engine's own count of the prompt; "estimate": bytes / 4.
    counted: Literal["render", "estimate"]


async def context_size(services: Runtime, turn: PreparedTurn) -> ContextSize:
    """The turn's input tokens as the model would see them, counted before it runs."""
    return await prompt_size(services, turn.request.model, turn.body, turn.headers)


async def prompt_size(
    services: Runtime, model: str, rendered: bytes, headers: Mapping[str, str]
) -> ContextSize:
    """The input tokens of the upstream request ``rendered`` (a multi-agent tree counts
    each agent's rounds with it)."""
    capabilities = services.tokens.get(model)
    if capabilities is not None and capabilities.render:
        body = orjson.loads(rendered)
        body["stream"] = False
        for key in TOKEN_IDS_FIELD:
            body.pop(key, None)
        try:
            ids = await services.upstream_now().render_response(orjson.dumps(body), headers)
            return ContextSize(len(ids), "render")
        except ApiError as exc:
            # Render refused (turned off since start-up?): the turn still runs, on the
            # estimate, rather than fail on a count the client did not ask for.
            log.warning("render endpoint refused a count", code=exc.code, reason=exc.message)
    return ContextSize(len(rendered) // BYTES_PER_TOKEN, "estimate")


async def passes_threshold(services: Runtime, turn: PreparedTurn, threshold: int) -> bool:
    size = await context_size(services, turn)
    passes = size.tokens > threshold
    log.info(
        "context counted for compaction",
        response_id=turn.response_id,
        input_tokens=size.tokens,
        counted=size.counted,
        compact_threshold=threshold,
        compacts=passes,
    )
    return passes


def answer_window(
    compaction: Item, window: Sequence[Item], new_input: Sequence[Item]
) -> list[Item]:
    """The answer round's prompt: the compaction, the calls the new input's tool outputs
    answer (a model server refuses an output whose call it has not seen), the new input."""
    answered = {
        value.as_dict().get("call_id") for value in new_input if value.type.endswith("_output")
    }
    taken = {id(value) for value in new_input}
    calls = [
        value
        for value in window
        if id(value) not in taken
        and not value.type.endswith("_output")
        and value.as_dict().get("call_id") in answered
    ]
    return [compaction, *calls, *new_input]


async def run_threshold_compaction(run: TurnInProgress) -> Ending:
    """The summary round, then the answer on the compacted window, as one response."""
    turn, relay, emit = run.turn, run.relay, run.emit
    fields: dict[str, Any] = orjson.loads(turn.body)
    fields.pop("input", None)
    window = compacted_window(turn.sent_prompt_items)
    summarized = await summarize(run, summary_body(fields, window, turn.request.max_output_tokens))
    if isinstance(summarized, ApiError):
        return summarized
    item, summary_upstream = summarized

    def relay_as_is(event: dict[str, Any]) -> None:
        ours = relay.translate(event)
        if ours is not None:
            emit(ours)

    relay.start_round(1)
    answer_body = render_body(fields, answer_window(to_item(item), window, turn.new_input))
    failure = await upstream_round(run, answer_body, relay_as_is, relays_as_is=True)
    if failure is not None:
        return failure
    upstream = relay.upstream_final or {}
    output = [item, *relay.final_output()]
    return Completion(
        status="incomplete" if upstream.get("status") == "incomplete" else "completed",
        output=output,
        model_output=[to_item(value) for value in output],
        usage=add_usage(
            normalize_usage(summary_upstream.get("usage")), normalize_usage(upstream.get("usage"))
        ),
        upstream=upstream,
        incomplete_details=upstream.get("incomplete_details"),
    )
