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
    # Only what the client left open is adopted, and only before anything was shown.
    assert [e["response"]["temperature"] for e in opening] == [0.6, 0.6]
    assert [e["response"]["top_p"] for e in opening] == [0.5, 0.5]
    relay.adopt_sampling({"temperature": 0.1})
    assert relay.base["temperature"] == 0.6
    assert relay.open_with({"type": "response.created"}) == []
