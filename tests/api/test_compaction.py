"""POST /v1/responses/compact: the model's summary as a compaction item, replayed as
context by later requests."""

from __future__ import annotations

import pytest
from openai import BadRequestError, OpenAI

from agentic_api.turns.compaction import SUMMARY_REQUEST
from agentic_api.wire.summary import SUMMARY_HEADER
from tests.upstream_sim import Reply, SimServer


def test_compact_then_continue_from_the_summary(client: OpenAI, sim: SimServer) -> None:
    sim.push(
        Reply("first answer"),
        Reply("second answer"),
        Reply("GOAL: plan a trip. DONE: picked Paris."),
        Reply("continuing"),
    )
    first = client.responses.create(
        model=sim.config.model, input="plan a trip", instructions="be helpful"
    )
    second = client.responses.create(
        model=sim.config.model, input="pick a city", previous_response_id=first.id
    )
    compacted = client.responses.compact(
        model=sim.config.model, previous_response_id=second.id, instructions="be helpful"
    )
    assert compacted.object == "response.compaction"
    kinds = [item.type for item in compacted.output]
    assert kinds == ["message", "message", "compaction"]
    assert [m.content[0].text for m in compacted.output[:2]] == ["plan a trip", "pick a city"]
    item = compacted.output[-1]
    assert item.encrypted_content == "GOAL: plan a trip. DONE: picked Paris."
    assert compacted.usage.input_tokens > 0

    summary_call = sim.requests("/v1/responses")[-1].json
    assert summary_call["stream"] is False and summary_call["store"] is False
    assert summary_call["input"][-1]["content"][0]["text"] == SUMMARY_REQUEST
    # The summary request extends the chain's own history, so its prefix is reusable.
    second_output = client.responses.with_raw_response.retrieve(second.id).http_response.json()
    expected = sim.requests("/v1/responses")[1].json["input"] + second_output["output"]
    assert summary_call["input"][:-1] == expected
    assert sim.requests("/v1/responses")[-1].cached_tokens > 0

    carried = [o.model_dump(exclude_none=True) for o in compacted.output]
    fresh = client.responses.create(
        model=sim.config.model, input=[*carried, {"role": "user", "content": "go on"}]
    )
    sent = sim.last("/v1/responses").json["input"]
    assert all(i.get("type") != "compaction" for i in sent)
    assert sent[2]["content"][0]["text"] == SUMMARY_HEADER + item.encrypted_content
    # Stored verbatim: the input items list shows the compaction item as given.
    stored = client.responses.input_items.list(fresh.id, order="asc")
    assert stored.data[2].type == "compaction"
    assert stored.data[2].encrypted_content == item.encrypted_content


def test_compaction_items_need_content(client: OpenAI, sim: SimServer) -> None:
    with pytest.raises(BadRequestError) as error:
        client.responses.create(
            model=sim.config.model, input=[{"type": "compaction", "id": "cmp_1"}]
        )
    assert error.value.body["param"] == "input[0].encrypted_content"  # type: ignore[index]
