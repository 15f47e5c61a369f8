"""Counting a turn's input tokens exactly, without running or storing the turn.

When the upstream has vLLM's render endpoint (``--enable-scale-out``, or a ``vllm launch
render`` process; detected at start-up, ``upstream/capabilities.py``), the turn's exact
request goes to ``POST /v1/responses/render`` and the count is the number of token ids
the engine would prefill: exact, and nothing is generated or computed on the GPU.

Otherwise the count is whatever the upstream reports as ``usage.input_tokens`` for the very request
the turn would send: the turn is prepared as for a create (same lineage, rehydrated
history, salt and headers), then sent to the upstream's stateless ``/v1/responses`` with
``max_output_tokens: 1`` and ``stream: false``. vLLM renders and tokenizes that request
itself, so the count is exact by construction (chat template, tool rendering, dropped tool
types and all) instead of an estimate from a tokenizer of ours that could drift.

The price is one prefill on the upstream. It is mostly a prefix-cache hit for a
continuation (the history was computed by the previous turn under the same salt, and the
lineage headers route it to the same replica), and it warms the cache for the turn that
usually follows a count. Nothing is stored: no response row, no items, no events.
"""

from __future__ import annotations

import orjson

from agentic_api.errors import ApiError, UpstreamError
from agentic_api.log import get_logger
from agentic_api.runtime import Runtime
from agentic_api.turns.data.caller import Caller
from agentic_api.turns.prepare.turn import prepare_turn
from agentic_api.wire.requests import CreateResponseRequest

log = get_logger("agentic_api.turns.input_tokens")

COUNT_OUTPUT_TOKENS = 1


async def count_input_tokens(
    services: Runtime, caller: Caller, request: CreateResponseRequest
) -> int:
    turn = await prepare_turn(services, caller, request)
    body = orjson.loads(turn.body)
    body["stream"] = False
    capabilities = services.tokens.get(request.model)
    if capabilities is not None and capabilities.render:
        try:
            return len(await services.upstream.render_response(orjson.dumps(body), turn.headers))
        except ApiError as exc:
            # vLLM answers 403 for render when --enable-scale-out is off; our credentials,
            # if really refused, fail the count below the same way.
            if exc.status_code in (502, 504) and exc.code != "upstream_authentication_failed":
                raise
            # Render refused (turned off since start-up?): count the way that always works.
            log.warning("render endpoint refused a count", code=exc.code, reason=exc.message)
    body["max_output_tokens"] = COUNT_OUTPUT_TOKENS
    answer = await services.upstream.create_response(orjson.dumps(body), turn.headers)
    usage = answer.get("usage")
    count = usage.get("input_tokens") if isinstance(usage, dict) else None
    if isinstance(count, bool) or not isinstance(count, int):
        raise UpstreamError("The model server did not report the request's input tokens.")
    return count
