"""The Conversations API through the official SDK, and responses made inside a
conversation: history, appends, races, previous_response_id into a conversation,
tenant isolation and bad input (on SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson
import pytest
from openai import BadRequestError, ConflictError, NotFoundError, OpenAI
from openai.types.responses import ToolParam
from sqlalchemy import text

from agentic_api.storage.database import Database
from agentic_api.turns.prepare.history import salt_identity
from lineage import prefix_digest
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.typed import narrow, unchecked
from tests.upstream_sim import Call, Reply, SimServer, StreamError, ToolCalls

# --- helpers ---------------------------------------------------------------------------


def db_rows(server: RunningServer, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async def run() -> list[tuple[Any, ...]]:
        db = Database.from_url(server.db_url, pool_size=1)
        try:
            async with db.read() as session:
                return [tuple(row) for row in (await session.execute(text(sql), params)).all()]
        finally:
            await db.close()

    return asyncio.run(run())


def stored_items(server: RunningServer, conversation_id: str) -> list[tuple[int, str, str]]:
    """(position, item_id, data) of a conversation's items, straight from the table."""
    rows = db_rows(
        server,
        "SELECT position, item_id, data FROM conversation_items"
        " WHERE conversation_id = :c ORDER BY position",
        c=conversation_id,
    )
    return [(int(p), str(i), str(d)) for p, i, d in rows]


def conversation_row(server: RunningServer, conversation_id: str) -> tuple[int, int, str | None]:
    """(version, next_position, head_response_id)."""
    rows = db_rows(
        server,
        "SELECT version, next_position, head_response_id FROM conversations WHERE id = :c",
        c=conversation_id,
    )
    assert len(rows) == 1
    version, next_position, head = rows[0]
    return int(version), int(next_position), head


def raw_input(body: bytes) -> bytes:
    """The bytes inside the upstream body's ``input`` array (the body ends with it)."""
    marker = b',"input":['
    assert body.endswith(b"]}")
    return body[body.index(marker) + len(marker) : -2]


def listed(client: OpenAI, conversation_id: str) -> list[dict[str, Any]]:
    """Every item of the conversation, oldest first, through the SDK's auto-pagination."""
    return [
        item.model_dump(exclude_none=True)
        for item in client.conversations.items.list(conversation_id, order="asc", limit=100)
    ]


def text_of(item: dict[str, Any]) -> str:
    content = item.get("content", [])
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def tenant_response_count(server: RunningServer, tenant: TenantKeys) -> int:
    rows = db_rows(server, "SELECT count(*) FROM responses WHERE tenant_id = :t", t=tenant.id)
    return int(rows[0][0])


# --- conversation objects ------------------------------------------------------------


def test_create_with_items_and_retrieve(client: OpenAI, server: RunningServer) -> None:
    conversation = client.conversations.create(
        items=[
            {"type": "message", "role": "developer", "content": "Be terse."},
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        ],
        metadata={"topic": "demo"},
    )
    assert conversation.id.startswith("conv_")
    assert conversation.object == "conversation"
    assert conversation.metadata == {"topic": "demo"}
    assert conversation.created_at > 0
    assert client.conversations.retrieve(conversation.id).model_dump() == conversation.model_dump()
    items = listed(client, conversation.id)
    assert [i["role"] for i in items] == ["developer", "user"]
    assert all(i["id"].startswith("msg_") for i in items)
    # A plain-string message is listed with content parts, as OpenAI shows it.
    assert items[0]["content"] == [{"type": "input_text", "text": "Be terse."}]
    assert text_of(items[1]) == "hello"
    # Stored as the canonical JSON of the item as given (plus its id): the replay bytes.
    stored = stored_items(server, conversation.id)
    assert [p for p, _, _ in stored] == [0, 1]
    assert orjson.loads(stored[0][2]) == {
        "type": "message",
        "role": "developer",
        "content": "Be terse.",
        "id": items[0]["id"],
    }
    empty = client.conversations.create()
    assert empty.metadata == {}
    assert client.conversations.items.list(empty.id).data == []


def test_update_metadata(client: OpenAI) -> None:
    conversation = client.conversations.create(metadata={"a": "1"})
    updated = client.conversations.update(conversation.id, metadata={"b": "2"})
    assert updated.id == conversation.id and updated.metadata == {"b": "2"}
    assert client.conversations.retrieve(conversation.id).metadata == {"b": "2"}
    with pytest.raises(BadRequestError):
        client.conversations.update(conversation.id, metadata={"k": "v" * 513})
    assert client.conversations.retrieve(conversation.id).metadata == {"b": "2"}
    cleared = client.conversations.update(conversation.id, metadata=None)
    assert cleared.metadata == {}


def test_list_items_pagination_both_orders(client: OpenAI) -> None:
    conversation = client.conversations.create(
        items=[{"role": "user", "content": f"m{n}"} for n in range(7)]
    )
    page = client.conversations.items.list(conversation.id, limit=3, order="asc")
    assert [text_of(i.model_dump()) for i in page.data] == ["m0", "m1", "m2"]
    assert page.has_more is True
    # The SDK's page model leaves out first_id, which the API returns.
    assert page.first_id == page.data[0].id  # type: ignore[attr-defined]
    assert page.last_id == page.data[-1].id
    ascending = [
        text_of(i.model_dump())
        for i in client.conversations.items.list(conversation.id, limit=3, order="asc")
    ]
    assert ascending == [f"m{n}" for n in range(7)]
    # The default order is newest first.
    newest = client.conversations.items.list(conversation.id, limit=3)
    assert [text_of(i.model_dump()) for i in newest.data] == ["m6", "m5", "m4"]
    descending = [
        text_of(i.model_dump()) for i in client.conversations.items.list(conversation.id, limit=3)
    ]
    assert descending == [f"m{n}" for n in range(6, -1, -1)]
    after = client.conversations.items.list(
        conversation.id, after=narrow(newest.data[1].id, str), limit=10
    )
    assert [text_of(i.model_dump()) for i in after.data] == ["m4", "m3", "m2", "m1", "m0"]
    assert after.has_more is False
    last = client.conversations.items.list(conversation.id, limit=7)
    assert last.has_more is False
    with pytest.raises(BadRequestError) as error:
        client.conversations.items.list(conversation.id, after="msg_unknown")
    assert error.value.body["param"] == "after"  # type: ignore[index]
    with pytest.raises(BadRequestError):
        client.conversations.items.list(conversation.id, limit=101)


def test_append_retrieve_and_delete_items(client: OpenAI, server: RunningServer) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "first"}])
    added = client.conversations.items.create(
        conversation.id,
        items=[
            {"role": "assistant", "content": "second"},
            # An id of the client's own: the SDK's input message has no "id".
            unchecked({"type": "message", "role": "user", "content": "third", "id": "msg_mine"}),
        ],
        include=["message.output_text.logprobs"],
    )
    assert added.object == "list" and added.has_more is False
    assert [text_of(i.model_dump()) for i in added.data] == ["second", "third"]
    assert added.first_id == added.data[0].id and added.last_id == "msg_mine"
    # Assistant text given as a string is shown as an output_text part.
    assert added.data[0].model_dump()["content"][0]["type"] == "output_text"
    items = listed(client, conversation.id)
    assert [text_of(i) for i in items] == ["first", "second", "third"]
    one = client.conversations.items.retrieve("msg_mine", conversation_id=conversation.id)
    assert one.id == "msg_mine" and text_of(one.model_dump()) == "third"
    version_before = conversation_row(server, conversation.id)[0]

    after_delete = client.conversations.items.delete(
        items[1]["id"], conversation_id=conversation.id
    )
    assert after_delete.object == "conversation" and after_delete.id == conversation.id
    assert [text_of(i) for i in listed(client, conversation.id)] == ["first", "third"]
    # Positions are never reused: the hole stays, order is kept, the version moved.
    assert [p for p, _, _ in stored_items(server, conversation.id)] == [0, 2]
    assert conversation_row(server, conversation.id)[0] == version_before + 1
    with pytest.raises(NotFoundError):
        client.conversations.items.retrieve(items[1]["id"], conversation_id=conversation.id)
    with pytest.raises(NotFoundError):
        client.conversations.items.delete(items[1]["id"], conversation_id=conversation.id)
    more = client.conversations.items.create(
        conversation.id, items=[{"role": "user", "content": "fourth"}]
    )
    assert [p for p, _, _ in stored_items(server, conversation.id)] == [0, 2, 3]
    assert listed(client, conversation.id)[-1]["id"] == more.data[0].id


def test_delete_conversation(client: OpenAI, server: RunningServer, sim: SimServer) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    response = client.responses.create(
        model=sim.config.model, input="question", conversation=conversation.id
    )
    deleted = client.conversations.delete(conversation.id)
    assert deleted.model_dump() == {
        "id": conversation.id,
        "object": "conversation.deleted",
        "deleted": True,
    }
    with pytest.raises(NotFoundError):
        client.conversations.retrieve(conversation.id)
    with pytest.raises(NotFoundError):
        client.conversations.items.list(conversation.id)
    with pytest.raises(NotFoundError):
        client.conversations.delete(conversation.id)
    with pytest.raises(NotFoundError) as error:
        client.responses.create(model=sim.config.model, input="x", conversation=conversation.id)
    assert error.value.code == "conversation_not_found"
    assert stored_items(server, conversation.id) == []
    # The response stays retrievable but no longer points at the conversation row...
    assert client.responses.retrieve(response.id).id == response.id
    rows = db_rows(server, "SELECT conversation_id FROM responses WHERE id = :r", r=response.id)
    assert rows == [(None,)]
    # ...and its history went with the conversation, so it cannot be continued.
    with pytest.raises(ConflictError) as conflict:
        client.responses.create(
            model=sim.config.model, input="more", previous_response_id=response.id
        )
    assert conflict.value.code == "conversation_history_changed"


# --- responses inside a conversation -------------------------------------------------


def test_turns_replay_the_conversation_byte_for_byte(
    client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    conversation = client.conversations.create(
        items=[
            {"role": "developer", "content": "You answer questions about foxes. " * 8},
            {"role": "user", "content": "the quick brown fox jumps over the lazy dog " * 10},
        ]
    )
    sim.push(Reply("first answer"), Reply("second answer"), Reply("third answer"))
    responses = []
    for turn in range(3):
        response = client.responses.create(
            model=sim.config.model,
            input=f"question {turn}",
            conversation=conversation.id if turn % 2 else {"id": conversation.id},
        )
        assert response.conversation is not None and response.conversation.id == conversation.id
        sent = sim.last("/v1/responses")
        assert sent.headers["x-session-id"] == conversation.id
        assert sent.headers["x-continuation-id"] == response.id
        # The model saw every item the conversation held before this turn, in order, as
        # stored, then the new input: nothing more.
        stored = stored_items(server, conversation.id)
        before = [d.encode() for _, _, d in stored][: -(1 + len(response.output))]
        new_input = stored[len(before)][2].encode()
        assert raw_input(sent.body) == b",".join([*before, new_input])
        responses.append(response)
    assert client.responses.retrieve(responses[0].id).conversation.id == conversation.id  # type: ignore[union-attr]
    # The conversation now holds: initial items, then per turn its input then output.
    items = listed(client, conversation.id)
    expected_ids = [items[0]["id"], items[1]["id"]]
    for response in responses:
        expected_ids.append(items[len(expected_ids)]["id"])  # the turn's input message
        expected_ids += [o.id for o in response.output]
    assert [i["id"] for i in items] == expected_ids
    assert [text_of(i) for i in items[2:]] == [
        "question 0",
        "first answer",
        "question 1",
        "second answer",
        "question 2",
        "third answer",
    ]
    assert [p for p, _, _ in stored_items(server, conversation.id)] == list(range(8))
    version, next_position, head = conversation_row(server, conversation.id)
    assert (version, next_position, head) == (3, 8, responses[-1].id)
    cached = [r.usage.input_tokens_details.cached_tokens for r in responses]  # type: ignore[union-attr]
    assert cached[0] < cached[1] < cached[2]
    # Each turn's stored checkpoint covers exactly what the model saw plus its answer.
    counts = db_rows(
        server,
        "SELECT history_item_count, conversation_position, depth FROM responses"
        " WHERE conversation_id = :c ORDER BY created_at, conversation_position",
        c=conversation.id,
    )
    assert counts == [(4, 2, 0), (6, 4, 1), (8, 6, 2)]
    # ...and its prefix digest is the digest of exactly those bytes.
    digests = db_rows(
        server, "SELECT prefix_digest FROM responses WHERE id = :r", r=responses[-1].id
    )
    every_item = [d.encode() for _, _, d in stored_items(server, conversation.id)]
    assert digests[0][0] == prefix_digest(sim.config.model, salt_identity(tenant.id, 1), every_item)


def test_items_added_between_turns_reach_the_next_turn(
    client: OpenAI, server: RunningServer, sim: SimServer
) -> None:
    conversation = client.conversations.create()
    client.responses.create(model=sim.config.model, input="one", conversation=conversation.id)
    added = client.conversations.items.create(
        conversation.id,
        items=[
            {"role": "user", "content": "a note added between turns"},
            {"role": "assistant", "content": "noted"},
        ],
    )
    client.responses.create(model=sim.config.model, input="two", conversation=conversation.id)
    sent = sim.last("/v1/responses").json["input"]
    assert [i["id"] for i in sent[-3:-1]] == [i.id for i in added.data]
    assert sent[-1]["content"][0]["text"] == "two"
    assert raw_input(sim.last("/v1/responses").body) == b",".join(
        d.encode() for _, _, d in stored_items(server, conversation.id)[:-1]
    )


def test_streamed_turn_in_a_conversation(client: OpenAI, sim: SimServer) -> None:
    conversation = client.conversations.create()
    sim.push(Reply("streamed answer"))
    events = list(
        client.responses.create(
            model=sim.config.model, input="stream it", conversation=conversation.id, stream=True
        )
    )
    assert events[0].response.conversation.id == conversation.id  # type: ignore[union-attr]
    assert events[-1].type == "response.completed"
    items = listed(client, conversation.id)
    assert [text_of(i) for i in items] == ["stream it", "streamed answer"]
    assert items[1]["id"] == events[-1].response.output[0].id


def test_function_call_round_trip_in_a_conversation(client: OpenAI, sim: SimServer) -> None:
    # The SDK's FunctionToolParam requires "strict", which the API takes as optional.
    tools: list[ToolParam] = [
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}  # type: ignore[list-item]
    ]
    conversation = client.conversations.create()
    sim.push(ToolCalls([Call("get_weather", {"city": "Paris"}, call_id="call_1")]), Reply("Sunny."))
    first = client.responses.create(
        model=sim.config.model, input="weather?", tools=tools, conversation=conversation.id
    )
    assert first.output[-1].type == "function_call"
    second = client.responses.create(
        model=sim.config.model,
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
        tools=tools,
        conversation=conversation.id,
    )
    assert second.output_text == "Sunny."
    sent = sim.last("/v1/responses").json["input"]
    assert [i["type"] for i in sent] == ["message", "function_call", "function_call_output"]
    assert sent[1]["id"] == first.output[-1].id
    types = [i["type"] for i in listed(client, conversation.id)]
    assert types == ["message", "function_call", "function_call_output", "message"]
    with pytest.raises(BadRequestError) as error:
        client.responses.create(
            model=sim.config.model,
            input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
            conversation=conversation.id,
        )
    assert error.value.code == "tool_call_not_found"


def test_store_false_in_a_conversation_appends_nothing(
    client: OpenAI, server: RunningServer, sim: SimServer
) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "context"}])
    before = conversation_row(server, conversation.id)
    response = client.responses.create(
        model=sim.config.model, input="ephemeral", conversation=conversation.id, store=False
    )
    assert response.status == "completed" and response.conversation.id == conversation.id  # type: ignore[union-attr]
    # It still saw the conversation's history...
    sent = sim.last("/v1/responses").json["input"]
    assert [text_of(i) for i in sent] == ["context", "ephemeral"]
    # ...but left nothing behind.
    assert [text_of(i) for i in listed(client, conversation.id)] == ["context"]
    assert conversation_row(server, conversation.id) == before
    with pytest.raises(NotFoundError):
        client.responses.retrieve(response.id)


def test_failed_turn_changes_nothing(client: OpenAI, server: RunningServer, sim: SimServer) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "context"}])
    before = conversation_row(server, conversation.id)
    sim.push(StreamError(after_events=2))
    with pytest.raises(Exception):  # noqa: B017 - the upstream failure's status is not ours
        client.responses.create(model=sim.config.model, input="boom", conversation=conversation.id)
    assert [text_of(i) for i in listed(client, conversation.id)] == ["context"]
    assert conversation_row(server, conversation.id) == before
    sim.push(Reply("recovered"))
    follow = client.responses.create(
        model=sim.config.model, input="again", conversation=conversation.id
    )
    assert follow.status == "completed"
    texts = [text_of(i) for i in listed(client, conversation.id)]
    assert texts == ["context", "again", "recovered"]


def test_previous_response_id_into_a_conversation(
    client: OpenAI, server: RunningServer, sim: SimServer
) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "setup"}])
    sim.push(Reply("answer one"), Reply("answer two"))
    first = client.responses.create(
        model=sim.config.model, input="one", conversation=conversation.id
    )
    first_turn = raw_input(sim.last("/v1/responses").body)
    client.responses.create(model=sim.config.model, input="two", conversation=conversation.id)
    client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "late"}])
    stored_before = stored_items(server, conversation.id)

    # A fork from the first turn sees the conversation up to and including that turn's
    # output (not the later turn, not the later item), in the conversation's session.
    fork = client.responses.create(
        model=sim.config.model, input="fork", previous_response_id=first.id
    )
    sent = sim.last("/v1/responses")
    first_output = stored_items(server, conversation.id)[2][2].encode()
    assert raw_input(sent.body).startswith(first_turn + b"," + first_output + b",")
    assert [text_of(i) for i in sent.json["input"]] == ["setup", "one", "answer one", "fork"]
    assert sent.headers["x-session-id"] == conversation.id
    assert fork.conversation is None
    # The fork is not part of the conversation and a chain from it keeps working.
    deeper = client.responses.create(
        model=sim.config.model, input="deeper", previous_response_id=fork.id
    )
    assert deeper.status == "completed"
    assert len(sim.last("/v1/responses").json["input"]) == 4 + len(fork.output) + 1
    assert stored_items(server, conversation.id) == stored_before

    # Deleting an item the first turn saw makes it (and the chain from it) uncontinuable.
    setup_id = stored_before[0][1]
    client.conversations.items.delete(setup_id, conversation_id=conversation.id)
    for parent in (first.id, fork.id, deeper.id):
        with pytest.raises(ConflictError) as error:
            client.responses.create(model=sim.config.model, input="x", previous_response_id=parent)
        assert error.value.code == "conversation_history_changed"
        assert error.value.body["param"] == "previous_response_id"  # type: ignore[index]
    # The conversation itself goes on from what it holds now.
    assert (
        client.responses.create(
            model=sim.config.model, input="on", conversation=conversation.id
        ).status
        == "completed"
    )


# --- isolation and bad input ------------------------------------------------------------


def test_other_tenants_conversations_are_invisible(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    conversation = client.conversations.create(
        items=[{"role": "user", "content": "private"}], metadata={"owner": "me"}
    )
    item_id = listed(client, conversation.id)[0]["id"]
    other = server.client(create_tenant(server.db_url))
    calls = [
        lambda: other.conversations.retrieve(conversation.id),
        lambda: other.conversations.update(conversation.id, metadata={"owner": "them"}),
        lambda: other.conversations.delete(conversation.id),
        lambda: other.conversations.items.list(conversation.id),
        lambda: other.conversations.items.create(
            conversation.id, items=[{"role": "user", "content": "intrusion"}]
        ),
        lambda: other.conversations.items.retrieve(item_id, conversation_id=conversation.id),
        lambda: other.conversations.items.delete(item_id, conversation_id=conversation.id),
        lambda: other.responses.create(
            model=sim.config.model, input="x", conversation=conversation.id
        ),
    ]
    for call in calls:
        with pytest.raises(NotFoundError):
            call()
    assert client.conversations.retrieve(conversation.id).metadata == {"owner": "me"}
    assert [text_of(i) for i in listed(client, conversation.id)] == ["private"]


def test_bad_input_is_a_400_and_changes_nothing(
    client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    def conversations_of_tenant() -> int:
        rows = db_rows(
            server, "SELECT count(*) FROM conversations WHERE tenant_id = :t", t=tenant.id
        )
        return int(rows[0][0])

    too_many = [{"role": "user", "content": f"m{n}"} for n in range(21)]
    bad_creates: list[dict[str, Any]] = [
        {"items": too_many},
        {"metadata": {f"k{n}": "v" for n in range(17)}},
        {"metadata": {"k" * 65: "v"}},
        {"metadata": {"k": 1}},
        {"items": [{"content": "no role or type"}]},
        {"items": [{"role": "wizard", "content": "x"}]},
        {"items": ["not an object"]},
        {"items": [{"type": "function_call_output", "output": "no call id"}]},
        {
            "items": [
                {"role": "user", "content": "a", "id": "msg_x"},
                {"role": "user", "content": "b", "id": "msg_x"},
            ]
        },
        {"unknown_field": 1},
    ]
    for body in bad_creates:
        with pytest.raises(BadRequestError) as error:
            client.post("/conversations", cast_to=object, body=body)
        assert error.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(BadRequestError) as error:
        client.conversations.create(items=too_many)  # type: ignore[arg-type]
    assert error.value.body["param"] == "items"  # type: ignore[index]
    with pytest.raises(BadRequestError) as error:
        client.conversations.create(items=[unchecked({"role": "wizard", "content": "x"})])
    assert error.value.body["param"] == "items[0].role"  # type: ignore[index]
    assert conversations_of_tenant() == 0

    conversation = client.conversations.create(items=[{"role": "user", "content": "keep"}])
    before = (conversation_row(server, conversation.id), stored_items(server, conversation.id))
    existing_id = before[1][0][1]
    bad_appends: list[list[Any]] = [
        too_many,
        [],
        [{"role": "user"}],
        [{"role": "user", "content": "dup", "id": existing_id}],
    ]
    for items in bad_appends:
        with pytest.raises(BadRequestError):
            client.conversations.items.create(conversation.id, items=items)
    with pytest.raises(BadRequestError):
        client.post(f"/conversations/{conversation.id}/items", cast_to=object, body={})
    with pytest.raises(BadRequestError):
        client.conversations.update(conversation.id, metadata={"k": "v" * 600})
    with pytest.raises(BadRequestError) as error:
        client.responses.create(
            model=sim.config.model,
            input="x",
            conversation=conversation.id,
            previous_response_id="resp_whatever",
        )
    assert error.value.code == "mutually_exclusive_parameters"
    with pytest.raises(BadRequestError) as error:
        client.responses.create(
            model=sim.config.model,
            input=[unchecked({"role": "user", "content": "dup", "id": existing_id})],
            conversation=conversation.id,
        )
    assert error.value.code == "duplicate_item_id"
    with pytest.raises(BadRequestError):
        client.responses.create(
            model=sim.config.model,
            input=[unchecked({"role": "nobody", "content": "x"})],
            conversation=conversation.id,
        )
    for empty in ("", {"id": ""}):
        with pytest.raises(BadRequestError) as error:
            client.responses.create(model=sim.config.model, input="x", conversation=empty)  # type: ignore[arg-type]
        assert error.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(NotFoundError) as missing:
        client.responses.create(model=sim.config.model, input="x", conversation="conv_missing")
    assert missing.value.code == "conversation_not_found"
    assert missing.value.body["param"] == "conversation"  # type: ignore[index]
    after = (conversation_row(server, conversation.id), stored_items(server, conversation.id))
    assert after == before
    assert client.conversations.retrieve(conversation.id).metadata == {}
    assert conversations_of_tenant() == 1
    assert tenant_response_count(server, tenant) == 0


# --- races ------------------------------------------------------------------------------


def _race(client: OpenAI, model: str, conversation_id: str, label: str, n: int) -> list[Any]:
    """``n`` turns released together on one conversation; each result is a Response or
    the exception it raised."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def turn(index: int) -> None:
        barrier.wait()
        try:
            results[index] = client.responses.create(
                model=model, input=f"{label} {index}", conversation=conversation_id
            )
        except Exception as exc:
            results[index] = exc

    threads = [threading.Thread(target=turn, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_concurrent_turns_exactly_one_wins_per_head(
    client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    n = 8
    conversation = client.conversations.create(items=[{"role": "user", "content": "start"}])
    expected_texts = ["start"]
    for round_number in range(2):
        version_before = conversation_row(server, conversation.id)[0]
        # Slow enough that every turn reads the same head before any of them commits.
        sim.push(*[Reply(f"answer {round_number}", delay=0.5) for _ in range(n)])
        results = _race(client, sim.config.model, conversation.id, f"round {round_number}", n)
        winners = [r for r in results if not isinstance(r, Exception)]
        losers = [r for r in results if isinstance(r, Exception)]
        assert len(winners) == 1, results
        assert len(losers) == n - 1
        for loser in losers:
            assert isinstance(loser, ConflictError), loser
            assert loser.status_code == 409
            assert loser.code == "conversation_conflict"
            assert loser.body["param"] == "conversation"  # type: ignore[index]
            assert "conversation" in loser.message.lower()
        winner = winners[0]
        winning_input = f"round {round_number} {results.index(winner)}"
        expected_texts += [winning_input, f"answer {round_number}"]
        # Only the winner's items were appended, in order, right after the old head.
        assert [text_of(i) for i in listed(client, conversation.id)] == expected_texts
        version, next_position, head = conversation_row(server, conversation.id)
        assert (version, head) == (version_before + 1, winner.id)
        positions = [p for p, _, _ in stored_items(server, conversation.id)]
        assert positions == list(range(len(expected_texts))) == list(range(next_position))
        ids = [i for _, i, _ in stored_items(server, conversation.id)]
        assert len(set(ids)) == len(ids)
        # The losers left no response rows behind.
        assert tenant_response_count(server, tenant) == round_number + 1


def test_streamed_loser_gets_the_conflict_as_an_error_event(
    client: OpenAI, server: RunningServer, sim: SimServer
) -> None:
    conversation = client.conversations.create()
    sim.push(Reply("fast", delay=0.3), Reply("slow", delay=1.0))
    barrier = threading.Barrier(2)
    streams: list[list[Any]] = [[], []]

    def turn(index: int) -> None:
        barrier.wait()
        stream = client.responses.create(
            model=sim.config.model,
            input=f"stream {index}",
            conversation=conversation.id,
            stream=True,
        )
        streams[index] = list(stream)

    threads = [threading.Thread(target=turn, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    terminal = sorted(events[-1].type for events in streams)
    assert terminal == ["error", "response.completed"]
    lost = next(events for events in streams if events[-1].type == "error")
    assert lost[-1].code == "conversation_conflict"
    assert "response.completed" not in [e.type for e in lost]
    loser_id = lost[0].response.id
    with pytest.raises(NotFoundError):
        client.responses.retrieve(loser_id)
    assert len(listed(client, conversation.id)) == 2


def _slow_turn(
    client: OpenAI, sim: SimServer, conversation_id: str
) -> tuple[threading.Thread, list[Any]]:
    """Starts a turn whose model answers after a second; returns once the model has it."""
    sim.push(Reply("too late", delay=1.0))
    outcome: list[Any] = []

    def turn() -> None:
        try:
            outcome.append(
                client.responses.create(
                    model=sim.config.model, input="slow turn", conversation=conversation_id
                )
            )
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=turn)
    thread.start()
    assert sim.wait_for(lambda: len(sim.requests("/v1/responses")) == 1, timeout=10)
    return thread, outcome


def test_an_item_change_during_a_turn_makes_the_turn_lose(
    client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "start"}])
    thread, outcome = _slow_turn(client, sim, conversation.id)
    client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "new"}])
    thread.join(timeout=30)
    assert isinstance(outcome[0], ConflictError) and outcome[0].code == "conversation_conflict"
    assert [text_of(i) for i in listed(client, conversation.id)] == ["start", "new"]
    assert tenant_response_count(server, tenant) == 0


def test_a_conversation_deleted_during_a_turn_is_a_404(
    client: OpenAI, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    conversation = client.conversations.create(items=[{"role": "user", "content": "start"}])
    thread, outcome = _slow_turn(client, sim, conversation.id)
    client.conversations.delete(conversation.id)
    thread.join(timeout=30)
    assert isinstance(outcome[0], NotFoundError) and outcome[0].code == "conversation_not_found"
    assert tenant_response_count(server, tenant) == 0
    assert stored_items(server, conversation.id) == []
