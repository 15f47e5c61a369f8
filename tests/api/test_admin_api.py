"""The admin inspection API (/admin/v1) over HTTP, on SQLite and PostgreSQL: admin-key
auth, tenant lifecycle, listings and their filters and cursors, timelines that explain
cache breaks in words, lineage trees, cache statistics, purges and the OpenAPI document."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from openai import AuthenticationError, OpenAI
from openai.types.responses import FunctionToolParam
from sqlalchemy import func, or_, select

from agentic_api.http.routes import conversations as conversations_routes
from agentic_api.http.routes import messages as messages_routes
from agentic_api.http.routes import models as models_routes
from agentic_api.http.routes import responses as responses_routes
from agentic_api.operator.http import admin as admin_routes
from agentic_api.storage.database import Database
from agentic_api.storage.models import Base, Conversation, Response
from lineage import IdKind, mint_id
from tests.conftest import RunningServer
from tests.support.fingerprints import bare_fingerprint
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.upstream_sim import SimServer

SEARCH_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "search",
    "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    "strict": False,
}

ADMIN_ROUTES = {
    ("GET", "/admin/v1/tenants"),
    ("POST", "/admin/v1/tenants"),
    ("GET", "/admin/v1/tenants/{tenant_id}"),
    ("POST", "/admin/v1/tenants/{tenant_id}/disable"),
    ("POST", "/admin/v1/tenants/{tenant_id}/enable"),
    ("POST", "/admin/v1/tenants/{tenant_id}/rotate_salt"),
    ("GET", "/admin/v1/tenants/{tenant_id}/api_keys"),
    ("POST", "/admin/v1/tenants/{tenant_id}/api_keys"),
    ("DELETE", "/admin/v1/tenants/{tenant_id}/api_keys/{key_id}"),
    ("GET", "/admin/v1/tenants/{tenant_id}/conversations"),
    ("GET", "/admin/v1/tenants/{tenant_id}/conversations/{conversation_id}"),
    ("GET", "/admin/v1/tenants/{tenant_id}/conversations/{conversation_id}/timeline"),
    ("DELETE", "/admin/v1/tenants/{tenant_id}/conversations/{conversation_id}"),
    ("DELETE", "/admin/v1/tenants/{tenant_id}/data"),
    ("GET", "/admin/v1/tenants/{tenant_id}/cache_stats"),
    ("GET", "/admin/v1/tenants/{tenant_id}/message_turns"),
    ("GET", "/admin/v1/responses/{response_id}/lineage"),
    ("GET", "/admin/v1/conversations/{conversation_id}/residency"),
    ("GET", "/admin/v1/responses/{response_id}/residency"),
    ("GET", "/admin/v1/responses/{response_id}/token_account"),
    ("GET", "/admin/v1/responses/{response_id}/agents"),
}


@pytest.fixture
def admin(server: RunningServer) -> Iterator[httpx.Client]:
    key = create_admin_key(server.db_url)
    with httpx.Client(
        base_url=f"{server.url}/admin/v1",
        headers={"Authorization": f"Bearer {key}"},
        timeout=20,
    ) as http:
        yield http


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def run_db(db_url: str, work: Any) -> Any:
    """Runs ``work(session)`` in one write transaction of a short-lived connection."""

    async def run() -> Any:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                return await work(session)
        finally:
            await db.close()

    return asyncio.run(run())


@dataclass(frozen=True)
class Seeded:
    conversation_id: str
    response_ids: list[str]


def seed_conversation(
    db_url: str,
    tenant_id: str,
    *,
    metadata: dict[str, Any] | None = None,
    updated_at: datetime | None = None,
    models: tuple[str, ...] = (),
) -> Seeded:
    """A conversation (and turns on the given models) written straight to the database, to
    control what a real turn cannot: its model name and its update time."""
    now = updated_at or datetime.now(UTC)
    conversation_id = mint_id(IdKind.CONVERSATION)

    async def work(session: Any) -> Seeded:
        session.add(
            Conversation(
                id=conversation_id,
                tenant_id=tenant_id,
                created_at=now,
                updated_at=now,
                metadata_=metadata or {},
            )
        )
        await session.flush()
        ids = []
        for model in models:
            fingerprint = bare_fingerprint(model)
            response_id = mint_id(IdKind.RESPONSE)
            ids.append(response_id)
            session.add(
                Response(
                    id=response_id,
                    tenant_id=tenant_id,
                    conversation_id=conversation_id,
                    session_id=conversation_id,
                    status="completed",
                    model=model,
                    created_at=now,
                    updated_at=now,
                    body={},
                    request={},
                    fingerprint=fingerprint.to_dict(),
                    fingerprint_digest=fingerprint.digest,
                    salt_epoch=1,
                    input_tokens=10,
                    cached_tokens=0,
                    output_tokens=1,
                )
            )
        await session.flush()
        return Seeded(conversation_id, ids)

    result: Seeded = run_db(db_url, work)
    return result


def tenant_row_counts(db_url: str, tenant_id: str, response_ids: list[str]) -> dict[str, int]:
    """Rows of the tenant in every table that holds tenant data: by ``tenant_id`` where the
    table has one, else by the response it belongs to. API keys are configuration, not
    data, and stay."""

    async def work(session: Any) -> dict[str, int]:
        counts: dict[str, int] = {}
        for table in Base.metadata.sorted_tables:
            if table.name == "api_keys":
                continue
            if "tenant_id" in table.c:
                where = table.c.tenant_id == tenant_id
            elif "response_id" in table.c:
                where = table.c.response_id.in_(response_ids or [""])
            else:
                continue
            query = select(func.count()).select_from(table).where(where)
            counts[table.name] = int((await session.execute(query)).scalar_one())
        return counts

    result: dict[str, int] = run_db(db_url, work)
    return result


def rows_referencing(db_url: str, conversation_id: str, response_ids: list[str]) -> dict[str, int]:
    """Rows, in every table, that are or belong to the conversation or the responses."""

    async def work(session: Any) -> dict[str, int]:
        counts: dict[str, int] = {}
        for table in Base.metadata.sorted_tables:
            matches = []
            if "conversation_id" in table.c:
                matches.append(table.c.conversation_id == conversation_id)
            if "response_id" in table.c:
                matches.append(table.c.response_id.in_(response_ids))
            if table.name in ("conversations", "responses"):
                matches.append(table.c.id.in_([conversation_id, *response_ids]))
            if matches:
                query = select(func.count()).select_from(table).where(or_(*matches))
                counts[table.name] = int((await session.execute(query)).scalar_one())
        return counts

    result: dict[str, int] = run_db(db_url, work)
    return result


def new_tenant(admin: httpx.Client, server: RunningServer) -> tuple[dict[str, Any], OpenAI]:
    created = ok(admin.post("/tenants", json={"name": f"t-{uuid.uuid4().hex[:10]}"}))
    keys = TenantKeys(created["tenant"]["id"], created["tenant"]["name"], created["api_key"]["key"])
    return created, server.client(keys, timeout=20)


def lineage_turn(admin: httpx.Client, response_id: str) -> dict[str, Any]:
    ancestors: list[dict[str, Any]] = ok(admin.get(f"/responses/{response_id}/lineage"))[
        "ancestors"
    ]
    assert ancestors[-1]["id"] == response_id
    return ancestors[-1]


# -- authentication ------------------------------------------------------------------------


def test_admin_routes_refuse_tenant_keys_and_anonymous_callers(
    server: RunningServer, tenant: TenantKeys, admin: httpx.Client
) -> None:
    probes = [
        ("GET", "/tenants"),
        ("POST", "/tenants"),
        ("GET", f"/tenants/{tenant.id}"),
        ("POST", f"/tenants/{tenant.id}/rotate_salt"),
        ("GET", f"/tenants/{tenant.id}/conversations"),
        ("GET", f"/tenants/{tenant.id}/cache_stats"),
        ("GET", f"/tenants/{tenant.id}/message_turns"),
        ("DELETE", f"/tenants/{tenant.id}/data"),
        ("GET", "/responses/resp_x/lineage"),
    ]
    base = f"{server.url}/admin/v1"
    for headers in (
        {},
        {"Authorization": f"Bearer {tenant.api_key}"},
        {"Authorization": "Bearer sk-agentic-admin-not-a-real-key"},
        {"Authorization": "Basic abc"},
    ):
        for method, path in probes:
            response = httpx.request(method, base + path, headers=headers, json={"name": "x"})
            error = error_of(response, 401)
            assert error["type"] == "invalid_request_error"
    # Nothing happened: the probes above included a salt rotation and a purge.
    assert ok(admin.get(f"/tenants/{tenant.id}"))["salt_epoch"] == 1
    # And an admin key is not a tenant key.
    admin_key = admin.headers["Authorization"]
    refused = httpx.get(f"{server.url}/v1/models", headers={"Authorization": admin_key})
    error_of(refused, 401)


# -- tenants and keys ----------------------------------------------------------------------


def test_tenant_lifecycle_and_keys(
    admin: httpx.Client, server: RunningServer, sim: SimServer
) -> None:
    created, client = new_tenant(admin, server)
    tenant = created["tenant"]
    key = created["api_key"]
    assert tenant["status"] == "active" and tenant["salt_epoch"] == 1
    assert key["key"].startswith("sk-agentic-") and key["key"].startswith(key["display_prefix"])
    assert client.responses.create(model=sim.config.model, input="hi").status == "completed"
    assert ok(admin.get(f"/tenants/{tenant['id']}")) == tenant

    duplicate = admin.post("/tenants", json={"name": tenant["name"]})
    assert error_of(duplicate, 409)["param"] == "name"
    error_of(admin.post("/tenants", json={"name": ""}), 400)
    error_of(admin.get("/tenants/ten_missing"), 404)

    # Disabling bites at once, although resolved keys are cached for a few seconds.
    disabled = ok(admin.post(f"/tenants/{tenant['id']}/disable"))
    assert disabled["status"] == "disabled" and disabled["disabled_at"] is not None
    assert ok(admin.post(f"/tenants/{tenant['id']}/disable")) == disabled
    with pytest.raises(AuthenticationError):
        client.responses.create(model=sim.config.model, input="hi")
    assert ok(admin.post(f"/tenants/{tenant['id']}/enable"))["status"] == "active"
    assert client.responses.create(model=sim.config.model, input="hi").status == "completed"

    second = ok(admin.post(f"/tenants/{tenant['id']}/api_keys", json={"name": "ci"}))
    assert second["name"] == "ci" and second["key"] != key["key"]
    listed = ok(admin.get(f"/tenants/{tenant['id']}/api_keys"))
    assert [k["id"] for k in listed["data"]] == [key["id"], second["id"]]
    # Keys are never shown again.
    assert all("key" not in k for k in listed["data"])
    assert key["key"] not in admin.get(f"/tenants/{tenant['id']}/api_keys").text

    revoked = ok(admin.delete(f"/tenants/{tenant['id']}/api_keys/{key['id']}"))
    assert revoked["status"] == "revoked" and revoked["revoked_at"] is not None
    with pytest.raises(AuthenticationError):
        client.responses.create(model=sim.config.model, input="hi")
    keys = TenantKeys(tenant["id"], tenant["name"], second["key"])
    assert server.client(keys).responses.create(model=sim.config.model, input="hi").id
    # A key id of another tenant is not found under this one.
    other, _ = new_tenant(admin, server)
    other_key = other["api_key"]["id"]
    error_of(admin.delete(f"/tenants/{tenant['id']}/api_keys/{other_key}"), 404)
    assert ok(admin.get(f"/tenants/{other['tenant']['id']}/api_keys"))["data"][0]["status"] == (
        "active"
    )


def test_tenant_list_pages_with_cursors(admin: httpx.Client) -> None:
    made = [ok(admin.post("/tenants", json={"name": f"p-{uuid.uuid4().hex}"}))["tenant"]["id"]]
    made += [
        ok(admin.post("/tenants", json={"name": f"p-{uuid.uuid4().hex}"}))["tenant"]["id"]
        for _ in range(4)
    ]
    seen: list[str] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if after:
            params["after"] = after
        page = ok(admin.get("/tenants", params=params))
        assert page["object"] == "list" and len(page["data"]) <= 2
        ids = [t["id"] for t in page["data"]]
        if ids:
            assert page["first_id"] == ids[0] and page["last_id"] == ids[-1]
        seen += ids
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
    assert [t for t in seen if t in made] == made
    error_of(admin.get("/tenants", params={"limit": 0}), 400)
    error_of(admin.get("/tenants", params={"limit": 101}), 400)


# -- lineage, timelines and cache breaks ---------------------------------------------------


def test_forced_cache_break_tools_change_is_explained_in_words(
    admin: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    model = sim.config.model
    first = client.responses.create(model=model, input="Tell me about caching. " * 8)
    second = client.responses.create(model=model, input="More.", previous_response_id=first.id)
    third = client.responses.create(
        model=model, input="Now search.", previous_response_id=second.id, tools=[SEARCH_TOOL]
    )
    fork = client.responses.create(model=model, input="Other way.", previous_response_id=first.id)

    lineage = ok(admin.get(f"/responses/{third.id}/lineage"))
    assert lineage["tenant_id"] == tenant.id
    turns = lineage["ancestors"]
    assert [t["id"] for t in turns] == [first.id, second.id, third.id]
    by_sdk = {r.id: r for r in (first, second, third)}
    for turn in turns:
        usage = by_sdk[turn["id"]].usage
        assert usage is not None
        assert turn["usage"]["input_tokens"] == usage.input_tokens
        assert turn["usage"]["cached_tokens"] == usage.input_tokens_details.cached_tokens
        assert turn["usage"]["output_tokens"] == usage.output_tokens
        assert turn["usage"]["hit_ratio"] == pytest.approx(
            usage.input_tokens_details.cached_tokens / usage.input_tokens
        )
        assert turn["lineage"]["continuation_id"] == turn["id"]
        assert turn["lineage"]["session_id"] == turns[0]["lineage"]["session_id"]
        assert turn["fingerprint"]["digest"] and turn["fingerprint"]["components"]["model"] == model

    assert turns[0]["cache_break"]["compared_to"] is None
    assert turns[0]["lineage"]["parent"] is None and turns[0]["lineage"]["depth"] == 0
    assert turns[1]["cache_break"]["broken"] is False
    assert turns[1]["usage"]["cached_tokens"] > 0  # the simulator reused the first prefix
    assert turns[2]["lineage"]["parent"] == second.id and turns[2]["lineage"]["depth"] == 2
    broken = turns[2]["cache_break"]
    assert broken["broken"] is True and broken["compared_to"] == second.id
    assert broken["changes"] == [
        {"component": "tools", "description": "tools changed: added 'search'"}
    ]
    assert broken["explanation"] == (
        "Cache reuse was not possible because tools changed: added 'search'."
    )
    assert turns[2]["fingerprint"]["components"]["tool_names"] == ["search"]

    # From the root, the tree shows the fork and the chain continued below the second turn.
    tree = ok(admin.get(f"/responses/{first.id}/lineage"))
    assert [t["id"] for t in tree["ancestors"]] == [first.id]
    assert tree["descendant_count"] == 3 and tree["truncated"] is False
    children = {node["id"]: node for node in tree["descendants"]}
    assert set(children) == {second.id, fork.id}
    assert [n["id"] for n in children[second.id]["children"]] == [third.id]
    assert "tools" in children[second.id]["children"][0]["cache_break"]["explanation"]
    assert children[fork.id]["children"] == []
    error_of(admin.get("/responses/resp_missing/lineage"), 404)


def test_rotating_the_salt_changes_the_next_turns_salt_and_is_explained(
    admin: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    model = sim.config.model
    first = client.responses.create(model=model, input="Remember this. " * 8)
    salt_before = sim.last("/v1/responses").json["cache_salt"]
    rotated = ok(admin.post(f"/tenants/{tenant.id}/rotate_salt"))
    assert rotated["salt_epoch"] == 2
    second = client.responses.create(model=model, input="And?", previous_response_id=first.id)
    assert sim.last("/v1/responses").json["cache_salt"] != salt_before
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens == 0

    turn = lineage_turn(admin, second.id)
    assert turn["fingerprint"]["components"]["salt_epoch"] == 2
    assert turn["cache_break"]["changes"][0]["component"] == "salt_epoch"
    assert turn["cache_break"]["explanation"].startswith(
        "Cache reuse was not possible because cache salt epoch changed from 1 to 2"
    )


def test_conversation_timeline_explains_tools_change_and_history_edit(
    admin: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    model = sim.config.model
    conversation = client.conversations.create(
        metadata={"topic": "timeline"},
        items=[{"type": "message", "role": "user", "content": "Context. " * 10}],
    )
    first = client.responses.create(model=model, input="One.", conversation=conversation.id)
    second = client.responses.create(model=model, input="Two.", conversation=conversation.id)
    # Appending between turns extends the history: no break.
    client.conversations.items.create(
        conversation.id, items=[{"type": "message", "role": "user", "content": "Aside."}]
    )
    third = client.responses.create(model=model, input="Three.", conversation=conversation.id)
    fourth = client.responses.create(
        model=model, input="Four.", conversation=conversation.id, tools=[SEARCH_TOOL]
    )
    # Deleting an item the last turn saw edits the history.
    items = client.conversations.items.list(conversation.id, order="asc")
    edited = items.data[1].id
    assert edited is not None
    client.conversations.items.delete(edited, conversation_id=conversation.id)
    fifth = client.responses.create(
        model=model, input="Five.", conversation=conversation.id, tools=[SEARCH_TOOL]
    )

    path = f"/tenants/{tenant.id}/conversations/{conversation.id}/timeline"
    timeline = ok(admin.get(path))
    turns = timeline["data"]
    assert [t["id"] for t in turns] == [first.id, second.id, third.id, fourth.id, fifth.id]
    assert timeline["has_more"] is False
    breaks = [t["cache_break"] for t in turns]
    assert breaks[0]["compared_to"] is None
    assert [b["broken"] for b in breaks] == [False, False, False, True, True]
    assert [b["compared_to"] for b in breaks[1:]] == [first.id, second.id, third.id, fourth.id]
    assert breaks[3]["explanation"] == (
        "Cache reuse was not possible because tools changed: added 'search'."
    )
    assert [c["component"] for c in breaks[4]["changes"]] == ["history"]
    assert breaks[4]["explanation"].startswith(
        "Cache reuse was not possible because history edited"
    )
    assert all(t["lineage"]["conversation_id"] == conversation.id for t in turns)

    # The same timeline, a page at a time: each page still compares to the turn before it.
    page = ok(admin.get(path, params={"limit": 2, "after": second.id}))
    assert [t["id"] for t in page["data"]] == [third.id, fourth.id] and page["has_more"] is True
    assert [t["cache_break"] for t in page["data"]] == breaks[2:4]


def test_timeline_of_a_conversation_without_turns_is_empty(
    admin: httpx.Client, tenant: TenantKeys, server: RunningServer
) -> None:
    seeded = seed_conversation(server.db_url, tenant.id)
    page = ok(admin.get(f"/tenants/{tenant.id}/conversations/{seeded.conversation_id}/timeline"))
    assert page == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }


# -- conversations, isolation and statistics -----------------------------------------------


def test_conversation_listing_filters_and_pages(
    admin: httpx.Client, tenant: TenantKeys, server: RunningServer
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    make = seed_conversation
    old = make(
        server.db_url, tenant.id, metadata={"env": "prod"}, updated_at=now - timedelta(days=3)
    )
    a = make(
        server.db_url,
        tenant.id,
        metadata={"env": "prod", 'we"ird.key': "x y"},
        updated_at=now - timedelta(hours=1),
        models=("model-a",),
    )
    b = make(
        server.db_url,
        tenant.id,
        metadata={"env": "dev", "n": "1"},
        updated_at=now - timedelta(hours=1),
        models=("model-b", "model-a"),
    )
    c = make(
        server.db_url, tenant.id, metadata={"env": "prod"}, updated_at=now, models=("model-b",)
    )
    # Another tenant's conversation matches every filter and must never appear.
    stranger = create_tenant(server.db_url)
    make(server.db_url, stranger.id, metadata={"env": "prod"}, updated_at=now, models=("model-a",))

    url = f"/tenants/{tenant.id}/conversations"

    def ids(**params: Any) -> list[str]:
        return [conv["id"] for conv in ok(admin.get(url, params=params))["data"]]

    # Newest first by updated_at, ties broken by id (newest id first).
    tied = sorted([a.conversation_id, b.conversation_id], reverse=True)
    assert ids() == [c.conversation_id, *tied, old.conversation_id]
    since = int((now - timedelta(days=1)).timestamp())
    assert ids(updated_since=since) == [c.conversation_id, *tied]
    assert ids(model="model-a") == tied
    assert ids(model="model-b") == [c.conversation_id, b.conversation_id]
    assert ids(model="model-z") == []
    assert ids(**{"metadata[env]": "prod"}) == [
        c.conversation_id,
        a.conversation_id,
        old.conversation_id,
    ]
    assert ids(**{"metadata[env]": "prod", "model": "model-a"}) == [a.conversation_id]
    assert ids(**{'metadata[we"ird.key]': "x y"}) == [a.conversation_id]
    assert ids(**{"metadata[n]": "1"}) == [b.conversation_id]
    assert ids(**{"metadata[env]": "prod", "metadata[n]": "1"}) == []
    assert ids(**{"metadata[missing]": "prod"}) == []

    listed = ok(admin.get(url, params={"limit": 1}))["data"][0]
    assert listed["turn_count"] == 1 and listed["metadata"] == {"env": "prod"}
    assert listed["tenant_id"] == tenant.id

    # Cursor pages walk the same order without gaps or repeats.
    walked: list[str] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1}
        if after:
            params["after"] = after
        page = ok(admin.get(url, params=params))
        walked += [conv["id"] for conv in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert walked == ids()
    error_of(admin.get(url, params={"after": "conv_missing"}), 400)
    error_of(admin.get(url, params={"metadata[" + "k" * 65 + "]": "v"}), 400)
    error_of(admin.get("/tenants/ten_missing/conversations"), 404)

    # Another tenant's conversation is not found through this tenant.
    theirs = ok(admin.get(f"/tenants/{stranger.id}/conversations"))["data"][0]["id"]
    error_of(admin.get(f"{url}/{theirs}"), 404)
    error_of(admin.get(f"{url}/{theirs}/timeline"), 404)
    error_of(admin.delete(f"{url}/{theirs}"), 404)
    assert ok(admin.get(f"/tenants/{stranger.id}/conversations/{theirs}"))["id"] == theirs


def test_cache_stats_equal_what_the_turns_reported(
    admin: httpx.Client, server: RunningServer, sim: SimServer
) -> None:
    created, client = new_tenant(admin, server)
    tenant_id = created["tenant"]["id"]
    model = sim.config.model
    reported = []
    previous = None
    for text in ("Start a long story. " * 6, "Go on.", "And then?"):
        response = client.responses.create(model=model, input=text, previous_response_id=previous)
        previous = response.id
        assert response.usage is not None
        reported.append(response.usage)
    # Another tenant's traffic must not count.
    _, other = new_tenant(admin, server)
    other.responses.create(model=model, input="Not yours.")

    stats = ok(admin.get(f"/tenants/{tenant_id}/cache_stats"))
    input_tokens = sum(u.input_tokens for u in reported)
    cached = sum(u.input_tokens_details.cached_tokens for u in reported)
    expected = {
        "object": "admin.cache_stats",
        "model": model,
        "turns": 3,
        "input_tokens": input_tokens,
        "cached_tokens": cached,
        "output_tokens": sum(u.output_tokens for u in reported),
        "hit_ratio": pytest.approx(cached / input_tokens),
    }
    assert cached > 0
    assert stats["data"] == [expected]
    assert stats["total"] == {**expected, "model": None}
    assert stats["first_id"] == stats["last_id"] == model and stats["has_more"] is False

    future = int((datetime.now(UTC) + timedelta(hours=1)).timestamp())
    past = int((datetime.now(UTC) - timedelta(hours=1)).timestamp())
    empty = ok(admin.get(f"/tenants/{tenant_id}/cache_stats", params={"since": future}))
    assert empty["data"] == [] and empty["total"]["turns"] == 0
    assert empty["total"]["hit_ratio"] is None
    window = ok(
        admin.get(f"/tenants/{tenant_id}/cache_stats", params={"since": past, "until": future})
    )
    assert window["total"]["turns"] == 3
    error_of(
        admin.get(f"/tenants/{tenant_id}/cache_stats", params={"since": future, "until": past}),
        400,
    )


def test_cache_stats_group_by_model_and_page(
    admin: httpx.Client, tenant: TenantKeys, server: RunningServer
) -> None:
    seed_conversation(server.db_url, tenant.id, models=("model-b", "model-a", "model-b"))
    url = f"/tenants/{tenant.id}/cache_stats"
    first = ok(admin.get(url, params={"limit": 1}))
    assert [s["model"] for s in first["data"]] == ["model-a"] and first["has_more"] is True
    rest = ok(admin.get(url, params={"limit": 1, "after": first["last_id"]}))
    assert [(s["model"], s["turns"], s["input_tokens"]) for s in rest["data"]] == [
        ("model-b", 2, 20)
    ]
    assert rest["has_more"] is False and rest["total"]["turns"] == 3


# -- destructive actions -------------------------------------------------------------------


def test_delete_conversation_leaves_nothing_behind(
    admin: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys, server: RunningServer
) -> None:
    model = sim.config.model
    doomed = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Secret."}]
    )
    turn = client.responses.create(model=model, input="Hi.", conversation=doomed.id, stream=True)
    turn_id = next(e.response.id for e in turn if e.type == "response.completed")
    # A chain continued from a conversation turn carries its content: it goes too.
    continued = client.responses.create(model=model, input="Go on.", previous_response_id=turn_id)
    kept = client.responses.create(model=model, input="Unrelated.")

    deleted = ok(admin.delete(f"/tenants/{tenant.id}/conversations/{doomed.id}"))
    assert deleted["object"] == "admin.deletion" and deleted["conversation_id"] == doomed.id
    assert deleted["deleted"]["conversations"] == 1
    assert deleted["deleted"]["responses"] == 2
    assert deleted["deleted"]["conversation_items"] == 3  # one seeded, input, output
    assert deleted["deleted"]["response_events"] > 0  # the streamed turn's stored events
    left = rows_referencing(server.db_url, doomed.id, [turn_id, continued.id])
    assert left == dict.fromkeys(left, 0)
    assert {"conversations", "conversation_items", "responses", "response_items"} <= set(left)
    assert tenant_row_counts(server.db_url, tenant.id, [])["responses"] == 1  # the unrelated one
    assert client.responses.retrieve(kept.id).id == kept.id
    error_of(admin.delete(f"/tenants/{tenant.id}/conversations/{doomed.id}"), 404)


def test_purge_tenant_data_leaves_nothing_behind(
    admin: httpx.Client, server: RunningServer, sim: SimServer
) -> None:
    model = sim.config.model
    created, client = new_tenant(admin, server)
    tenant_id = created["tenant"]["id"]
    response_ids: list[str] = []
    conversation = client.conversations.create(metadata={"k": "v"})
    response_ids.append(
        client.responses.create(model=model, input="a", conversation=conversation.id).id
    )
    with client.responses.stream(model=model, input="b") as stream:
        response_ids.append(stream.get_final_response().id)
    response_ids.append(
        client.responses.create(model=model, input="c", previous_response_id=response_ids[-1]).id
    )
    other_created, other = new_tenant(admin, server)
    other_ids = [other.responses.create(model=model, input="mine").id]
    other.conversations.create(metadata={"k": "v"})
    other_before = tenant_row_counts(server.db_url, other_created["tenant"]["id"], other_ids)

    before = tenant_row_counts(server.db_url, tenant_id, response_ids)
    assert all(before[name] > 0 for name in ("responses", "response_items", "conversations"))
    purged = ok(admin.delete(f"/tenants/{tenant_id}/data"))
    assert purged["tenant_id"] == tenant_id and purged["conversation_id"] is None
    after = tenant_row_counts(server.db_url, tenant_id, response_ids)
    assert after == dict.fromkeys(after, 0)
    assert {name: purged["deleted"].get(name, 0) for name in before} == before
    # The tenant, its keys and everyone else's data stay.
    assert client.responses.create(model=model, input="fresh start").status == "completed"
    assert tenant_row_counts(server.db_url, other_created["tenant"]["id"], other_ids) == (
        other_before
    )
    error_of(admin.delete("/tenants/ten_missing/data"), 404)


# -- OpenAPI -------------------------------------------------------------------------------


def test_openapi_describes_every_admin_and_v1_route(server: RunningServer) -> None:
    document = httpx.get(f"{server.url}/openapi.json").json()
    paths = document["paths"]
    described = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    # Every route of the public routers, read off the routers themselves.
    for module in (
        admin_routes,
        responses_routes,
        conversations_routes,
        models_routes,
        messages_routes,
    ):
        for route in module.router.routes:
            assert isinstance(route, APIRoute)
            for method in route.methods or ():
                assert (method, route.path_format) in described, (method, route.path)
    assert {r for r in described if r[1].startswith("/admin/")} == ADMIN_ROUTES
    assert {
        ("POST", "/v1/responses"),
        ("GET", "/v1/responses/{response_id}"),
        ("DELETE", "/v1/responses/{response_id}"),
        ("GET", "/v1/responses/{response_id}/input_items"),
        ("GET", "/v1/models"),
        ("POST", "/v1/conversations"),
        ("GET", "/v1/conversations/{conversation_id}/items"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/messages/count_tokens"),
    } <= described

    assert document["components"]["securitySchemes"]["AdminKey"]["scheme"] == "bearer"
    for method, path in ADMIN_ROUTES:
        operation = paths[path][method.lower()]
        assert operation["summary"] and operation["security"] == [{"AdminKey": []}]
        success = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert "$ref" in success, (method, path)
        assert {"401", "4XX"} <= set(operation["responses"])
        assert "422" not in operation["responses"]  # validation errors are 400s here
    listing = paths["/admin/v1/tenants/{tenant_id}/conversations"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {
        "after",
        "limit",
        "updated_since",
        "model",
        "metadata",
    }
