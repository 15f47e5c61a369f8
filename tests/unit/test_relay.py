"""The relay's translation of upstream events into ours (unit level)."""

from __future__ import annotations

from agentic_api.turns.relay import StreamRelay


def base() -> dict:
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
    expected = [{"type": "output_text", "text": "", "annotations": []}]
    assert done["item"]["content"] == expected
    assert final[0]["content"] == expected
    assert final[0]["id"] == done["item"]["id"]
