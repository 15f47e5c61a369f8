"""Histories holding ``reasoning`` items, as Codex sends them back (``summary``,
``content``, ``encrypted_content`` null or set): the model server gets what it accepts
(vLLM refuses any encrypted content), the store keeps what the client sent, and the
bytes the model sees for an item are the same on every turn that replays it."""

from __future__ import annotations

from typing import Any

import orjson
from openai import OpenAI

from tests.support.typed import unchecked
from tests.upstream_sim import Reply, SimServer

ENCRYPTED = {
    "type": "reasoning",
    "id": "rs_codex_1",
    "summary": [{"type": "summary_text", "text": "Looked at the files."}],
    "content": None,
    "encrypted_content": "gAAAAB-opaque-to-anyone-but-openai",
}
READABLE = {
    "type": "reasoning",
    "id": "rs_codex_2",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "The answer is in main.py."}],
    "encrypted_content": None,
}


def history() -> list[dict[str, Any]]:
    return [
        {"type": "message", "role": "user", "content": "find the bug"},
        ENCRYPTED,
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_codex_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
        },
        READABLE,
        {"type": "message", "role": "user", "content": "go on"},
    ]


def input_array(body: bytes) -> bytes:
    """The raw bytes of the request's ``input`` array (render puts it last)."""
    start = body.index(b',"input":[') + len(b',"input":')
    return body[start:-1]


def test_reasoning_items_reach_the_model_as_it_accepts_them(client: OpenAI, sim: SimServer) -> None:
    sim.push(Reply("fixed", reasoning="thinking"), Reply("done"))
    first = client.responses.create(model=sim.config.model, input=unchecked(history()))
    assert first.status == "completed"

    sent = sim.last("/v1/responses").json["input"]
    reasoning = [item for item in sent if item["type"] == "reasoning"]
    assert [item["encrypted_content"] for item in reasoning] == [None, None]
    # What the model can read is kept (vLLM renders content, else the summary).
    assert reasoning[0]["summary"] == ENCRYPTED["summary"]
    assert reasoning[1]["content"] == READABLE["content"]

    # Stored as the client sent it: the listing shows the encrypted content.
    listed = client.responses.input_items.list(first.id, order="asc").data
    assert listed[1].type == "reasoning"
    assert listed[1].encrypted_content == ENCRYPTED["encrypted_content"]

    # The continuation replays the same bytes: its input starts with the first turn's
    # input, byte for byte, then the first turn's output (its reasoning item included).
    client.responses.create(model=sim.config.model, input="more", previous_response_id=first.id)
    one, two = sim.requests("/v1/responses")[-2:]
    assert input_array(two.body).startswith(input_array(one.body)[:-1] + b",")
    assert b'"encrypted_content":"gAAAAB' not in two.body
    replayed = orjson.loads(input_array(two.body))
    assert [item["type"] for item in replayed[len(sent) :]] == ["reasoning", "message", "message"]
    assert two.cached_tokens and two.cached_tokens > 0


def test_a_stateless_resend_keeps_the_prefix(client: OpenAI, sim: SimServer) -> None:
    """Codex over HTTP resends the whole history (store: false) every turn."""
    sim.push(Reply("one"), Reply("two"))
    turn = history()
    client.responses.create(model=sim.config.model, input=unchecked(turn), store=False)
    turn.append({"type": "message", "role": "user", "content": "and now?"})
    client.responses.create(model=sim.config.model, input=unchecked(turn), store=False)
    one, two = (r for r in sim.requests("/v1/responses")[-2:])
    assert input_array(two.body).startswith(input_array(one.body)[:-1] + b",")
    assert two.cached_tokens and two.cached_tokens > 0
