"""Bad input gets a clear OpenAI-shaped error and changes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from openai import OpenAI
from sqlalchemy import String

from agentic_api.storage.database import Database
from agentic_api.storage.models import Base
from agentic_api.storage.responses import ResponseRepository
from agentic_api.wire.limits import MAX_ID_LENGTH, MAX_JSON_DEPTH
from lineage import canonical_json
from tests.conftest import RunningServer
from tests.support.sql import rows
from tests.support.tenants import TenantKeys, create_admin_key
from tests.support.typed import unchecked
from tests.support.websocket import open_socket, until_terminal
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"

CASES: list[tuple[str, Any, int, str | None]] = [
    ("missing model", {"input": "x"}, 400, "model"),
    ("missing input", {"model": MODEL}, 400, "input"),
    ("model wrong type", {"model": 5, "input": "x"}, 400, "model"),
    ("input wrong type", {"model": MODEL, "input": 5}, 400, "input"),
    ("item not an object", {"model": MODEL, "input": ["hi"]}, 400, "input[0]"),
    ("item without type", {"model": MODEL, "input": [{"text": "hi"}]}, 400, "input[0].type"),
    (
        "bad role",
        {"model": MODEL, "input": [{"type": "message", "role": "boss", "content": "x"}]},
        400,
        "input[0].role",
    ),
    (
        "tool output without call id",
        {"model": MODEL, "input": [{"type": "function_call_output", "output": "x"}]},
        400,
        "input[0].call_id",
    ),
    (
        "both conversation and parent",
        {"model": MODEL, "input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"},
        400,
        "previous_response_id",
    ),
    (
        "too much metadata",
        {"model": MODEL, "input": "x", "metadata": {f"k{i}": "v" for i in range(17)}},
        400,
        "metadata",
    ),
    (
        "metadata value too long",
        {"model": MODEL, "input": "x", "metadata": {"k": "v" * 513}},
        400,
        "metadata",
    ),
    (
        "metadata key too long",
        {"model": MODEL, "input": "x", "metadata": {"k" * 65: "v"}},
        400,
        "metadata",
    ),
    (
        "temperature out of range",
        {"model": MODEL, "input": "x", "temperature": 3},
        400,
        "temperature",
    ),
    ("tool without type", {"model": MODEL, "input": "x", "tools": [{"name": "f"}]}, 400, "tools"),
    (
        "too many input items",
        {"model": MODEL, "input": [{"role": "user", "content": "x"}] * 10_001},
        400,
        "input",
    ),
    (
        "background without store",
        {"model": MODEL, "input": "x", "background": True, "store": False},
        400,
        "background",
    ),
]


def count_responses(db_url: str, tenant_id: str) -> int:
    async def run() -> int:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.read() as session:
                return await ResponseRepository(session).count_for_tenant(tenant_id)
        finally:
            await db.close()

    return asyncio.run(run())


@pytest.mark.parametrize(("case", "body", "status", "param"), CASES, ids=[c[0] for c in CASES])
def test_bad_create_requests(
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
    case: str,
    body: Any,
    status: int,
    param: str | None,
) -> None:
    response = httpx.post(
        f"{server.url}/v1/responses",
        json=body,
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(param or "")
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b'{"model": '])
def test_unparseable_bodies(server: RunningServer, tenant: TenantKeys, raw: bytes) -> None:
    response = httpx.post(
        f"{server.url}/v1/responses",
        content=raw,
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] in ("invalid_json", "empty_body")


def test_input_items_limit_bounds(server: RunningServer, tenant: TenantKeys) -> None:
    for query in ("limit=0", "limit=101", "order=sideways"):
        response = httpx.get(
            f"{server.url}/v1/responses/resp_x/input_items?{query}",
            headers={"authorization": f"Bearer {tenant.api_key}"},
        )
        assert response.status_code == 400, query
        assert response.json()["error"]["type"] == "invalid_request_error"


# --- issue 14: what the databases cannot hold is refused up front, the rest is kept ----


def nested(depth: int) -> Any:
    """A JSON value ``depth`` levels deep (``{}`` is 1)."""
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def post(server: RunningServer, tenant: TenantKeys, body: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/responses",
        content=encoded(body),
        headers={"authorization": f"Bearer {tenant.api_key}", "content-type": "application/json"},
        timeout=30,
        **kwargs,
    )


def user_item(**extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "x"}],
    } | extra


class DeepArray:
    """An array ``depth`` levels deep, spliced into the body's text."""

    def __init__(self, depth: int) -> None:
        self.text = "[" * depth + "]" * depth


DEEP_1000 = DeepArray(1000)
DEEP_100K = DeepArray(100_000)


def encoded(body: dict[str, Any]) -> bytes:
    deep = {k: v for k, v in body.items() if isinstance(v, DeepArray)}
    plain = orjson.dumps({k: v for k, v in body.items() if k not in deep})
    spliced = "".join(f',"{k}":{v.text}' for k, v in deep.items())
    return plain[:-1] + spliced.encode() + b"}"


# Each is refused with a 400 before the model runs, on both databases: a plain string
# column (ids, model, item type) or a queried one (metadata) cannot hold it.
REFUSED_UP_FRONT: list[tuple[str, dict[str, Any], str, str]] = [
    ("NUL in model", {"model": "sim\x00model", "input": "x"}, "model", "invalid_value"),
    (
        "NUL in previous_response_id",
        {"model": MODEL, "input": "x", "previous_response_id": "resp_\x00"},
        "previous_response_id",
        "invalid_value",
    ),
    (
        "NUL in conversation",
        {"model": MODEL, "input": "x", "conversation": "conv_\x00"},
        "conversation",
        "invalid_value",
    ),
    (
        "NUL in an item id",
        {"model": MODEL, "input": [user_item(id="msg_\x00")]},
        "input[0].id",
        "invalid_value",
    ),
    (
        "NUL in an item type",
        {"model": MODEL, "input": [{"type": "mess\x00age", "x": 1}]},
        "input[0].type",
        "invalid_value",
    ),
    (
        "NUL in a metadata value",
        {"model": MODEL, "input": "x", "metadata": {"k": "v\x00"}},
        "metadata",
        "invalid_value",
    ),
    (
        "NUL in a metadata key",
        {"model": MODEL, "input": "x", "metadata": {"k\x00": "v"}},
        "metadata",
        "invalid_value",
    ),
    (
        "item id longer than the id columns",
        {"model": MODEL, "input": [user_item(id="m" * (MAX_ID_LENGTH + 1))]},
        "input[0].id",
        "invalid_value",
    ),
    (
        "JSON one level too deep",
        {"model": MODEL, "input": [user_item(extra=nested(MAX_JSON_DEPTH - 2))]},
        "",
        "json_too_deep",
    ),
    # Sent as text: the standard encoders refuse to write JSON this deep.
    ("JSON 1,000 levels deep", {"model": MODEL, "input": DEEP_1000}, "", "json_too_deep"),
    ("JSON 100,000 levels deep", {"model": MODEL, "input": DEEP_100K}, "", "json_too_deep"),
    ("store is a string", {"model": MODEL, "input": "x", "store": "no"}, "store", "invalid_type"),
    (
        "stream is a string",
        {"model": MODEL, "input": "x", "stream": "yes"},
        "stream",
        "invalid_type",
    ),
    (
        "background is 1",
        {"model": MODEL, "input": "x", "background": 1},
        "background",
        "invalid_type",
    ),
    (
        "parallel_tool_calls is a string",
        {"model": MODEL, "input": "x", "parallel_tool_calls": "true"},
        "parallel_tool_calls",
        "invalid_type",
    ),
    (
        "temperature is a string",
        {"model": MODEL, "input": "x", "temperature": "1"},
        "temperature",
        "invalid_type",
    ),
    (
        "max_output_tokens is a float",
        {"model": MODEL, "input": "x", "max_output_tokens": 16.5},
        "max_output_tokens",
        "invalid_type",
    ),
    (
        "max_output_tokens is a boolean",
        {"model": MODEL, "input": "x", "max_output_tokens": True},
        "max_output_tokens",
        "invalid_type",
    ),
    (
        "max_output_tokens past a 32-bit integer",
        {"model": MODEL, "input": "x", "max_output_tokens": 2**31},
        "max_output_tokens",
        "invalid_value",
    ),
    ("model is a number", {"model": 5, "input": "x"}, "model", "invalid_type"),
    # Found by the fuzz tier: nothing to answer, nothing to place the turn in a session.
    ("empty input, nothing to continue", {"model": MODEL, "input": []}, "input", "empty_input"),
]


@pytest.mark.parametrize(
    ("case", "body", "param", "code"), REFUSED_UP_FRONT, ids=[c[0] for c in REFUSED_UP_FRONT]
)
def test_refused_before_the_model_runs(
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
    case: str,
    body: dict[str, Any],
    param: str,
    code: str,
) -> None:
    for stream in (False, True):
        response = post(server, tenant, {**body, "stream": body.get("stream", stream)})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "invalid_request_error"
        assert error["code"] == code, error
        assert (error["param"] or "").startswith(param), error
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


# Never a client's id: ours (derived or minted) or the model server's.
NOT_CLIENT_IDS = {"session_id", "worker_id", "message_id"}


def test_ids_fit_the_id_columns(server: RunningServer) -> None:
    """One id limit, equal to what both schemas (the models and the migrated database)
    store."""
    declared = {
        (table.name, column.name): column.type
        for table in Base.metadata.tables.values()
        for column in table.columns
        if (column.name == "id" or column.name.endswith("_id"))
        and column.name not in NOT_CLIENT_IDS
    }
    assert ("response_items", "item_id") in declared
    for where, kind in declared.items():
        assert isinstance(kind, String) and kind.length == MAX_ID_LENGTH, where
    migrated = rows(
        server.db_url,
        "SELECT table_name, column_name, character_maximum_length "
        "FROM information_schema.columns WHERE table_schema = 'public'"
        if server.backend == "postgres"
        else "SELECT m.name, p.name, p.type FROM sqlite_master m "
        "JOIN pragma_table_info(m.name) p WHERE m.type = 'table'",
    )
    lengths = {(t, c): str(n) for t, c, n in migrated}
    for where in declared:
        assert lengths[where] in (str(MAX_ID_LENGTH), f"VARCHAR({MAX_ID_LENGTH})"), where


def test_nul_is_kept_byte_exact(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, client: OpenAI
) -> None:
    """NUL in what the client sent (text, prompt_cache_key, tool names, JSON keys) and in
    what the model said is stored and replayed byte for byte, on both databases."""
    text = "before\x00after"
    item = {
        "type": "message",
        "role": "user",
        "id": "msg_client_nul",
        "content": [{"type": "input_text", "text": text, "odd\x00key": ["\x00"]}],
    }
    tool = {"type": "function", "name": "tool\x00name", "parameters": {}}
    sim.push(Reply("model\x00said"))
    first = post(
        server,
        tenant,
        {"model": MODEL, "input": [item], "prompt_cache_key": "key\x00", "tools": [tool]},
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "model\x00said"
    assert body["prompt_cache_key"] == "key\x00"
    assert body["tools"][0]["name"] == "tool\x00name"
    stored = rows(
        server.db_url,
        "SELECT data FROM response_items WHERE response_id = :id ORDER BY position",
        id=body["id"],
    )
    assert stored[0][0].encode() == canonical_json(item)
    assert orjson.loads(stored[1][0])["content"][0]["text"] == "model\x00said"
    assert (
        client.responses.retrieve(body["id"]).model_dump(mode="json")["output"][0]["content"][0][
            "text"
        ]
        == "model\x00said"
    )
    second = client.responses.create(model=MODEL, input="and?", previous_response_id=body["id"])
    assert second.status == "completed"
    replayed = sim.last("/v1/responses").json["input"]
    assert replayed[0] == item
    assert replayed[1]["content"][0]["text"] == "model\x00said"


def test_the_deepest_json_allowed_commits(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, client: OpenAI
) -> None:
    """Exactly MAX_JSON_DEPTH levels (in an item, and in a tool's schema that every
    stored stream event echoes) is stored, streamed and continued on both databases."""
    # The body is level 1, ``input`` 2, the item 3: ``extra`` adds the rest.
    deep_item = user_item(extra=nested(MAX_JSON_DEPTH - 3))
    deep_tool = {"type": "function", "name": "f", "parameters": nested(MAX_JSON_DEPTH - 3)}
    for stream in (False, True):
        response = post(
            server,
            tenant,
            {"model": MODEL, "input": [deep_item], "tools": [deep_tool], "stream": stream},
        )
        assert response.status_code == 200, response.text
    # Deep on purpose, in a field of the item's own ("extra") that the SDK's types lack.
    last = client.responses.create(
        model=MODEL, input=[unchecked(deep_item)], tools=[unchecked(deep_tool)]
    )
    follow = client.responses.create(model=MODEL, input="x", previous_response_id=last.id)
    assert follow.status == "completed"


@pytest.mark.parametrize(
    "url",
    [
        "/v1/responses/resp%00x",
        "/v1/responses/resp_x?starting_after=1&include[]=%00",
        "/v1/responses/resp_x/input_items?after=%00",
        "/v1/conversations/conv%00",
        "/v1/conversations/conv_x/items?after=a%00b",
        "/v1/conversations/conv_x/items/item%00",
    ],
)
def test_nul_in_the_url_is_a_400(server: RunningServer, tenant: TenantKeys, url: str) -> None:
    response = httpx.get(
        f"{server.url}{url}", headers={"authorization": f"Bearer {tenant.api_key}"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "query",
    ["starting_after=2147483648", "starting_after=9223372036854775808", "starting_after=-2"],
)
def test_integer_query_parameters_are_bounded(
    server: RunningServer, tenant: TenantKeys, client: OpenAI, query: str
) -> None:
    created = client.responses.create(model=MODEL, input="x", stream=False)
    response = httpx.get(
        f"{server.url}/v1/responses/{created.id}?stream=true&{query}",
        headers={"authorization": f"Bearer {tenant.api_key}"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "starting_after"


@pytest.mark.parametrize(
    "path",
    [
        "/tenants/{tenant}/conversations?updated_since=100000000000000000000",
        "/tenants/{tenant}/conversations?updated_since=253402300800",
        "/tenants/{tenant}/cache_stats?until=9223372036854775808",
        "/tenants/{tenant}/cache_stats?since=2147483648000000",
    ],
)
def test_admin_time_parameters_are_bounded(
    server: RunningServer, tenant: TenantKeys, path: str
) -> None:
    admin = create_admin_key(server.db_url)
    response = httpx.get(
        f"{server.url}/admin/v1{path.format(tenant=tenant.id)}",
        headers={"authorization": f"Bearer {admin}"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_value"


def test_admin_names_refuse_nul(server: RunningServer) -> None:
    admin = create_admin_key(server.db_url)
    for body in ({"name": "a\x00b"}, {"name": "ok-name", "key_name": "k\x00"}, {"name": 5}):
        response = httpx.post(
            f"{server.url}/admin/v1/tenants",
            json=body,
            headers={"authorization": f"Bearer {admin}"},
        )
        assert response.status_code == 400, response.text


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([user_item(id="m" * (MAX_ID_LENGTH + 1))], "items[0].id"),
        ([user_item(id="msg_\x00")], "items[0].id"),
        ([{"type": "mess\x00age"}], "items[0].type"),
    ],
)
def test_conversation_items_follow_the_same_rules(
    server: RunningServer, tenant: TenantKeys, items: list[Any], param: str
) -> None:
    auth = {"authorization": f"Bearer {tenant.api_key}"}
    created = httpx.post(f"{server.url}/v1/conversations", json={"items": items}, headers=auth)
    assert created.status_code == 400, created.text
    assert created.json()["error"]["param"] == param
    conversation = httpx.post(f"{server.url}/v1/conversations", json={}, headers=auth).json()
    added = httpx.post(
        f"{server.url}/v1/conversations/{conversation['id']}/items",
        json={"items": items},
        headers=auth,
    )
    assert added.status_code == 400, added.text
    assert added.json()["error"]["param"] == param


def test_websocket_frames_follow_the_same_rules(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    """Refused frames get an error frame; the connection stays open for the next one."""
    with open_socket(server, tenant) as socket:
        for frame, code in (
            ({"model": MODEL, "input": "x", "store": "no"}, "invalid_type"),
            ({"model": MODEL, "input": [user_item(extra=nested(MAX_JSON_DEPTH))]}, "json_too_deep"),
            ({"model": "m\x00", "input": "x"}, "invalid_value"),
        ):
            socket.send(orjson.dumps({"type": "response.create", **frame}).decode())
            error = orjson.loads(socket.recv(timeout=20))
            assert error["type"] == "error", error
            assert error["error"]["code"] == code, error
        socket.send(
            orjson.dumps({"type": "response.create", "model": MODEL, "input": "x"}).decode()
        )
        assert until_terminal(socket)[-1]["type"] == "response.completed"
    assert sim.calls("/v1/responses") == 1
