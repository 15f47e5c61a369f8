"""``prompt_cache_options.prewarm: true`` through the API (SQLite and PostgreSQL), with the
official SDK as client: the turn's prompt goes upstream through the same path and routing
coordinates as the real turn, for one output token; nothing is stored; a later real turn
with the same prompt hits the simulator's prefix cache (filled by the prewarm alone: the
cache is emptied before it)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import BadRequestError, InternalServerError, NotFoundError, OpenAI, omit
from openai.types.responses import Response

from tests.api.test_bad_input import count_responses
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.support.websocket import open_socket, send_create, until_terminal
from tests.upstream_sim import Fail, Reply, SimServer
from tests.upstream_sim.state import RecordedRequest

MODEL = "sim-model"
PREWARM: Any = {"prewarm": True}
# Long enough to fill several of the simulator's 16-token blocks.
ANSWER = "An answer with words enough to fill two or three blocks of the prefix cache."
# What the prewarm changes in the turn's request, and what only a real turn asks for (its
# token plan: vLLM's token ids, for the reuse account).
CHANGED = {"max_output_tokens", "stream", "enable_response_messages"}


def first_turn(client: OpenAI, sim: SimServer, **kwargs: Any) -> Response:
    sim.push(Reply(ANSWER))
    made: Response = client.responses.create(
        model=MODEL, input="The first question, long enough to matter?", **kwargs
    )
    return made


def without_ids(body: dict[str, Any]) -> dict[str, Any]:
    """The request as the model sees it: a new input item's id is minted per request (and
    the chat template never renders ids)."""
    kept = {k: v for k, v in body.items() if k not in CHANGED}
    kept["input"] = [{k: v for k, v in item.items() if k != "id"} for item in body["input"]]
    return kept


def same_prompt(a: RecordedRequest, b: RecordedRequest) -> None:
    """Two upstream requests with the same prompt and routing coordinates."""
    assert without_ids(a.json) == without_ids(b.json)
    for header in ("x-session-id", "x-continuation-id"):
        assert (a.headers.get(header) is None) == (b.headers.get(header) is None)
    assert a.headers.get("x-session-id") == b.headers.get("x-session-id")


def cold(sim: SimServer) -> None:
    """Empties the simulator's prefix cache, as an eviction during a tool call would."""
    sim.state.cache_clear()


def full_blocks(tokens: int, sim: SimServer) -> int:
    size = sim.config.block_size
    return tokens // size * size


def test_a_prewarmed_continuation_hits_and_nothing_is_stored(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    first = first_turn(client, sim, instructions="Be brief.")
    cold(sim)
    prewarm = client.responses.create(
        model=MODEL,
        input="The next question?",
        instructions="Be brief.",
        previous_response_id=first.id,
        prompt_cache_options=PREWARM,
    )
    warming = sim.last("/v1/responses")
    assert warming.json["max_output_tokens"] == 1 and warming.json["stream"] is False
    # The whole history went up: the first turn's input and output, then the new input.
    assert len(warming.json["input"]) == 3
    assert prewarm.status == "completed" and prewarm.output == []
    assert prewarm.previous_response_id == first.id
    assert prewarm.usage is not None
    assert prewarm.usage.input_tokens == warming.prompt_tokens
    assert prewarm.usage.input_tokens_details.cached_tokens == 0  # the cache was emptied
    assert prewarm.usage.output_tokens == 0 and prewarm.usage.total_tokens == (
        prewarm.usage.input_tokens
    )
    assert prewarm.prompt_cache_options is not None
    assert prewarm.prompt_cache_options.model_dump() == {
        "mode": "implicit",
        "ttl": "30m",
        "comparison_response_id": None,
        "prewarm": True,
    }
    # Nothing stored: no row, nothing to retrieve or continue.
    assert count_responses(server.db_url, tenant.id) == 1
    with pytest.raises(NotFoundError):
        client.responses.retrieve(prewarm.id)
    with pytest.raises(NotFoundError):
        client.responses.create(model=MODEL, input="x", previous_response_id=prewarm.id)

    sim.push(Reply("the real answer"))
    real = client.responses.create(
        model=MODEL,
        input="The next question?",
        instructions="Be brief.",
        previous_response_id=first.id,
    )
    turn = sim.last("/v1/responses")
    same_prompt(warming, turn)
    assert turn.prompt_tokens == warming.prompt_tokens
    assert real.usage is not None
    cached = real.usage.input_tokens_details.cached_tokens
    assert cached == full_blocks(turn.prompt_tokens or 0, sim) and cached > 0
    assert real.output_text == "the real answer"


def test_without_the_prewarm_the_same_continuation_is_cold(client: OpenAI, sim: SimServer) -> None:
    # The control of the test above: the hit came from the prewarm, not from the turn.
    first = first_turn(client, sim)
    cold(sim)
    sim.push(Reply("the real answer"))
    real = client.responses.create(
        model=MODEL, input="The next question?", previous_response_id=first.id
    )
    assert real.usage is not None and real.usage.input_tokens_details.cached_tokens == 0


def test_a_streamed_prewarm_answers_created_then_completed(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    first = first_turn(client, sim)
    cold(sim)
    with client.responses.stream(
        model=MODEL, input="Next?", previous_response_id=first.id, prompt_cache_options=PREWARM
    ) as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    assert kinds == ["response.created", "response.completed"]
    assert final.output == [] and final.usage is not None
    assert final.usage.input_tokens == sim.last("/v1/responses").prompt_tokens
    assert sim.last("/v1/responses").json["stream"] is False
    assert count_responses(server.db_url, tenant.id) == 1
    sim.push(Reply("real"))
    real = client.responses.create(model=MODEL, input="Next?", previous_response_id=first.id)
    assert real.usage is not None and real.usage.input_tokens_details.cached_tokens > 0


def test_a_conversation_prewarm_warms_its_history_and_leaves_it_unchanged(
    client: OpenAI, sim: SimServer
) -> None:
    conversation = client.conversations.create()
    first_turn(client, sim, conversation=conversation.id)
    items = [item.id for item in client.conversations.items.list(conversation.id)]
    cold(sim)
    prewarm = client.responses.create(
        model=MODEL, input="More?", conversation=conversation.id, prompt_cache_options=PREWARM
    )
    assert prewarm.conversation is not None and prewarm.conversation.id == conversation.id
    assert len(sim.last("/v1/responses").json["input"]) == 3
    assert [item.id for item in client.conversations.items.list(conversation.id)] == items
    sim.push(Reply("real"))
    real = client.responses.create(model=MODEL, input="More?", conversation=conversation.id)
    assert real.usage is not None and real.usage.input_tokens_details.cached_tokens > 0
    assert len(list(client.conversations.items.list(conversation.id))) == len(items) + 2


def test_a_chain_root_prewarm_warms_a_first_turn(client: OpenAI, sim: SimServer) -> None:
    prewarm = client.responses.create(
        model=MODEL,
        input="A first question that is long enough to fill a block or two of the cache?",
        prompt_cache_options=PREWARM,
        store=False,
    )
    assert prewarm.usage is not None and prewarm.usage.input_tokens > 0
    sim.push(Reply("real"))
    real = client.responses.create(
        model=MODEL,
        input="A first question that is long enough to fill a block or two of the cache?",
    )
    assert real.usage is not None and real.usage.input_tokens_details.cached_tokens > 0


def test_an_idempotency_key_is_neither_claimed_nor_replayed(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    headers = {"Idempotency-Key": "prewarm-key-1"}
    for _ in range(2):
        client.responses.create(
            model=MODEL, input="Warm me.", prompt_cache_options=PREWARM, extra_headers=headers
        )
    # Safe to repeat, so each retry warms again; and the key stays free for a real turn.
    assert sim.calls("/v1/responses") == 2
    sim.push(Reply("answered"))
    real = client.responses.create(model=MODEL, input="Warm me.", extra_headers=headers)
    assert real.output_text == "answered"
    assert count_responses(server.db_url, tenant.id) == 1


def test_a_websocket_prewarm_keeps_the_lanes_unstored_chain(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply(ANSWER))
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Over the socket?", store=False)
        first = final_of(connection)
        cold(sim)
        connection.response.create(
            model=MODEL,
            input="Then?",
            store=False,
            previous_response_id=first.id,
            prompt_cache_options=PREWARM,
        )
        events = [event.type for event in until_end(connection)]
        assert events == ["response.created", "response.completed"]
        warming = sim.last("/v1/responses")
        sim.push(Reply("real"))
        # The lane still continues the first response (the prewarm replaced nothing).
        connection.response.create(
            model=MODEL, input="Then?", store=False, previous_response_id=first.id
        )
        real = final_of(connection)
    same_prompt(warming, sim.last("/v1/responses"))
    assert real.usage is not None and real.usage.input_tokens_details.cached_tokens > 0


def test_a_websocket_prewarm_overrides_generate_false(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with open_socket(server, tenant) as socket:
        send_create(
            socket,
            model=MODEL,
            input="warm",
            generate=False,
            prompt_cache_options={"prewarm": True},
        )
        frames = until_terminal(socket)
    assert [frame["type"] for frame in frames] == ["response.created", "response.completed"]
    # Unlike generate: false, the model was called and no checkpoint was recorded.
    assert sim.calls("/v1/responses") == 1
    assert count_responses(server.db_url, tenant.id) == 0


def final_of(connection: Any) -> Response:
    events = until_end(connection)
    assert events[-1].type == "response.completed", events[-1]
    response: Response = events[-1].response
    return response


def until_end(connection: Any) -> list[Any]:
    seen: list[Any] = []
    for event in connection:
        seen.append(event)
        assert event.type != "error", event
        if event.type in ("response.completed", "response.incomplete", "response.failed"):
            return seen
    raise AssertionError("connection closed early")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        (
            {"prompt_cache_options": {"prewarm": True, "comparison_response_id": "resp_x"}},
            "prompt_cache_options.comparison_response_id",
        ),
        ({"prompt_cache_options": {"prewarm": "yes"}}, "prompt_cache_options.prewarm"),
        (
            {"input": [{"type": "function_call_output", "call_id": "nope", "output": "1"}]},
            "input[0].call_id",
        ),
        ({"input": [{"type": "compaction_trigger"}]}, "prompt_cache_options.prewarm"),
    ],
)
def test_refusals_come_before_the_upstream_call(
    extra: dict[str, Any],
    param: str,
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
) -> None:
    body = {"model": MODEL, "input": "x", "prompt_cache_options": PREWARM, **extra}
    answer = httpx.post(
        f"{server.url}/v1/responses",
        json=body,
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


def test_an_unknown_parent_is_the_real_turns_404(client: OpenAI, sim: SimServer) -> None:
    with pytest.raises(NotFoundError) as raised:
        client.responses.create(
            model=MODEL,
            input="x",
            previous_response_id="resp_missing",
            prompt_cache_options=PREWARM,
        )
    assert raised.value.code == "previous_response_not_found"
    assert sim.calls("/v1/responses") == 0


def test_an_upstream_failure_is_a_plain_error_and_stores_nothing(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    first = first_turn(client, sim)
    sim.push(Fail(500))
    with pytest.raises(InternalServerError):
        client.with_options(max_retries=0).responses.create(
            model=MODEL, input="x", previous_response_id=first.id, prompt_cache_options=PREWARM
        )
    sim.push(Fail(400, message="bad sampling"))
    with pytest.raises(BadRequestError):
        client.responses.create(
            model=MODEL, input="x", prompt_cache_options=PREWARM, previous_response_id=omit
        )
    assert count_responses(server.db_url, tenant.id) == 1
