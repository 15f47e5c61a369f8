"""The relay's translation of upstream events into ours (unit level)."""

from __future__ import annotations

from typing import Any

from agentic_api.turns.runner.relay import StreamRelay


def base() -> dict[str, Any]:
    return {"id": "resp_ours", "object": "response", "output": []}


def test_item_ids_are_ours_and_stable_between_stream_and_final() -> None:
    relay = StreamRelay(base())
    relay.opening_events()
    added = relay.translate(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "msg_up", "type": "message", "content": []},
        }
    )
    delta = relay.translate(
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "item_id": "msg_up",
            "content_index": 0,
            "delta": "hi",
        }
    )
    assert added is not None and delta is not None
    ours = added["item"]["id"]
    assert ours.startswith("msg_") and ours != "msg_up"
    assert delta["item_id"] == ours
    assert [added["sequence_number"], delta["sequence_number"]] == [2, 3]
    relay.translate(
        {
            "type": "response.completed",
            "response": {
                "output": [
                    {
                        "id": "msg_up",
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "hi", "annotations": []}],
                    }
                ]
            },
        }
    )
    assert [item["id"] for item in relay.final_output()] == [ours]


def test_empty_assistant_content_is_made_replayable_everywhere() -> None:
    relay = StreamRelay(base())
    done = relay.translate(
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "m", "type": "message", "role": "assistant", "content": []},
        }
    )
    relay.translate(
        {
            "type": "response.completed",
            "response": {
                "output": [{"id": "m", "type": "message", "role": "assistant", "content": []}]
            },
        }
    )
    final = relay.final_output()
    assert done is not None
    expected = [{"type": "output_text", "text": "", "annotations": [], "logprobs": []}]
    assert done["item"]["content"] == expected
    assert final[0]["content"] == expected
    assert final[0]["id"] == done["item"]["id"]


def test_output_text_arrays_and_item_status_are_filled_in_events_and_final() -> None:
    """vLLM sends ``logprobs: null`` on finished parts and may leave a status out; the
    client and the store both get arrays and a status."""
    relay = StreamRelay(base())
    part: dict[str, Any] = {
        "type": "output_text",
        "text": "hi",
        "annotations": [],
        "logprobs": None,
    }
    done_part = relay.translate(
        {
            "type": "response.content_part.done",
            "output_index": 0,
            "item_id": "m",
            "content_index": 0,
            "part": part,
        }
    )
    text_done = relay.translate(
        {"type": "response.output_text.done", "output_index": 0, "item_id": "m", "text": "hi"}
    )
    item = {"id": "m", "type": "message", "role": "assistant", "content": [part]}
    relay.translate({"type": "response.completed", "response": {"output": [item]}})
    assert done_part is not None and text_done is not None
    assert done_part["part"]["logprobs"] == [] and text_done["logprobs"] == []
    final = relay.final_output()[0]
    assert final["content"][0]["logprobs"] == [] and final["status"] == "completed"


def test_snapshots_carry_the_sampling_the_model_server_applied() -> None:
    relay = StreamRelay({**base(), "temperature": 1.0, "top_p": 0.5}, ("temperature",))
    opening = relay.open_with(
        {"type": "response.created", "response": {"temperature": 0.6, "top_p": 0.9}}
    )
    # Only what the client left open is adopted.
    assert [e["response"]["temperature"] for e in opening] == [0.6, 0.6]
    assert [e["response"]["top_p"] for e in opening] == [0.5, 0.5]
    assert relay.open_with({"type": "response.created"}) == []
    # The final object says what was applied, even if the snapshots said otherwise.
    relay.adopt_sampling({"temperature": 0.1, "top_p": 0.2})
    assert (relay.base["temperature"], relay.base["top_p"]) == (0.1, 0.5)


def test_a_stream_opens_with_the_model_values_learned_from_an_earlier_turn() -> None:
    learned: dict[str, float] = {}
    first = StreamRelay({**base(), "temperature": 1.0, "top_p": 1.0}, ("temperature",), learned)
    # Nothing learned yet: the opening must wait for the upstream's snapshot.
    assert not first.sampling_known
    first.open_with({"type": "response.created", "response": {"temperature": 0.6, "top_p": 0.9}})
    # What the client set (top_p) is the client's, not the model's: not learned.
    assert learned == {"temperature": 0.6}

    second = StreamRelay({**base(), "temperature": 1.0, "top_p": 0.3}, ("temperature",), learned)
    assert second.sampling_known
    opening = second.open_known()
    assert [e["type"] for e in opening] == ["response.created", "response.in_progress"]
    assert [(e["response"]["temperature"], e["response"]["top_p"]) for e in opening] == [
        (0.6, 0.3),
        (0.6, 0.3),
    ]
    assert second.open_known() == [] and second.open_with({"type": "response.created"}) == []
    # A model server whose defaults changed: the turn ends with what it applied, and the
    # next turn opens with that.
    second.adopt_sampling({"temperature": 0.7, "top_p": 0.3})
    assert second.base["temperature"] == 0.7 and learned == {"temperature": 0.7}


def test_a_request_that_sets_every_sampling_field_opens_at_once() -> None:
    relay = StreamRelay({**base(), "temperature": 0.2, "top_p": 0.4}, ())
    assert relay.sampling_known
    assert [e["response"]["temperature"] for e in relay.open_known()] == [0.2, 0.2]
