"""Token-level truth through the API (SQLite and PostgreSQL): each stored turn's exact
token ids from the upstream (the simulator's ``enable_response_messages``), its reuse
account against its parent's ids with the cause of any loss, where operators see it
(admin, timeline, /metrics), and that clients never see the engine's token fields."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from openai import OpenAI, omit
from openai.types.responses import FunctionToolParam, ResponseFunctionToolCall
from sqlalchemy import text

from agentic_api.app import build_services
from agentic_api.settings import ConfigError
from agentic_api.storage.database import Database
from tests.conftest import RunningServer, running_server, server_settings
from tests.support.tenants import create_admin_key, create_tenant
from tests.support.typed import narrow
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

MODEL = "sim-model"
ENGINE_FIELDS = (b"input_messages", b"output_messages", b"raw_message_tokens")
TOOL: FunctionToolParam = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    "strict": False,
}


@pytest.fixture
def admin(server: RunningServer) -> Iterator[httpx.Client]:
    key = create_admin_key(server.db_url)
    with httpx.Client(
        base_url=f"{server.url}/admin/v1", headers={"Authorization": f"Bearer {key}"}, timeout=20
    ) as http:
        yield http


def account_of(admin: httpx.Client, response_id: str) -> dict[str, Any]:
    answer = admin.get(f"/responses/{response_id}/token_account")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def exact_chain(client: OpenAI, sim: SimServer, turns: int, *, stream: bool) -> list[str]:
    ids: list[str] = []
    previous = None
    for turn in range(turns):
        sim.push(Reply(f"Answer number {turn}, with a few words to make it longer."))
        kwargs: dict[str, Any] = {"model": MODEL, "input": f"Question {turn}?"}
        if previous:
            kwargs["previous_response_id"] = previous
        if stream:
            with client.responses.stream(**kwargs) as events:
                previous = events.get_final_response().id
        else:
            previous = client.responses.create(**kwargs).id
        ids.append(previous)
    return ids


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_chain_is_token_exact_turn_after_turn(
    client: OpenAI, sim: SimServer, admin: httpx.Client, stream: bool
) -> None:
    ids = exact_chain(client, sim, 4, stream=stream)
    asked = [r.json for r in sim.requests("/v1/responses")]
    assert all(body.get("enable_response_messages") is True for body in asked)
    first = account_of(admin, ids[0])
    assert first["account"]["status"] == "cold_start"
    assert first["artifact"]["prompt_tokens"] == sim.requests("/v1/responses")[0].prompt_tokens
    for response_id, request in zip(ids[1:], sim.requests("/v1/responses")[1:], strict=True):
        shown = account_of(admin, response_id)
        account = shown["account"]
        assert account["status"] == "exact" and account["token_exact"] is True
        assert account["reusable_tokens"] == account["parent_tokens"]
        assert account["measured_cached"] == request.cached_tokens
        assert account["expected_cached"] == account["measured_cached"] == account["ideal_cached"]
        block = account["block_size"]
        assert block == 16  # read from the simulator's /metrics
        assert account["expected_cached"] == (account["parent_tokens"] - 1) // block * block
        assert account["lost"].get("partial_block") == (
            account["reusable_tokens"] - account["expected_cached"]
        )
        assert set(account["lost"]) <= {"partial_block"}
        assert account["explanation"].startswith("Token-exact")
        assert shown["artifact"]["prompt_tokens"] == request.prompt_tokens
        assert shown["artifact"]["output_tokens"] == request.output_tokens


def test_clients_never_see_the_engine_token_fields(
    client: OpenAI, sim: SimServer, server: RunningServer, tenant: Any
) -> None:
    sim.push(Reply("first"), Reply("second"))
    first = client.responses.create(model=MODEL, input="Hi")
    headers = {"Authorization": f"Bearer {tenant.api_key}"}
    with httpx.Client(base_url=f"{server.url}/v1", headers=headers, timeout=20) as http:
        raw = http.post(
            "/responses",
            json={
                "model": MODEL,
                "input": "Again",
                "previous_response_id": first.id,
                "stream": True,
            },
        )
        stored = http.get(f"/responses/{first.id}")
        replay = http.get(f"/responses/{raw_id(raw.content)}", params={"stream": "true"})
    for body in (raw.content, stored.content, replay.content):
        assert all(field not in body for field in ENGINE_FIELDS), body[:300]
    assert sim.last("/v1/responses").json["enable_response_messages"] is True


def raw_id(sse: bytes) -> str:
    for line in sse.splitlines():
        if line.startswith(b"data: "):
            event = orjson.loads(line[6:])
            if event.get("type") == "response.created":
                return str(event["response"]["id"])
    raise AssertionError("no response.created event")


def test_a_re_tokenized_answer_is_found_at_its_offset(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    # The model generates "\n\n" as one token; sent back as text it becomes two.
    tail = " ".join(f"word{i}" for i in range(40))
    sim.push(Reply(f"Line one.\n\n{tail}", newline_pairs_as_one=True), Reply("ok"))
    first = client.responses.create(model=MODEL, input="Two lines, please.")
    parent_prompt = narrow(sim.last("/v1/responses").prompt_tokens, int)
    second = client.responses.create(model=MODEL, input="Thanks", previous_response_id=first.id)
    account = account_of(admin, second.id)["account"]
    assert account["status"] == "diverged" and account["cause"] == "retokenization"
    divergence = account["divergence"]
    assert divergence["region"] == "output"
    # "Line", " ", "one", "." then the merged newline pair.
    assert divergence["offset"] == parent_prompt + 4
    assert divergence["realigned"] is True
    assert len(divergence["parent_tokens"]) == 1 and len(divergence["child_tokens"]) == 2
    assert account["reusable_tokens"] == parent_prompt + 4
    assert account["lost"]["retokenization"] == account["parent_tokens"] - parent_prompt - 4
    assert account["measured_cached"] == account["expected_cached"]
    assert account["expected_cached"] < account["ideal_cached"]
    # Decoded after the commit, in the background.
    deadline = time.monotonic() + 10
    while account["divergence"]["parent_pieces"] is None and time.monotonic() < deadline:
        time.sleep(0.1)
        account = account_of(admin, second.id)["account"]
    assert account["divergence"]["parent_pieces"] == ["\n\n"]
    assert account["divergence"]["child_pieces"] == ["\n", "\n"]
    assert "one token ['\\n\\n'] became two ['\\n', '\\n']" in account["explanation"]


def test_salt_rotation_and_tools_changes_are_named(
    client: OpenAI, sim: SimServer, admin: httpx.Client, tenant: Any
) -> None:
    sim.push(Reply("a"), Reply("b"), Reply("c"))
    first = client.responses.create(model=MODEL, input="Start")
    with_tools = client.responses.create(
        model=MODEL, input="Now with a tool", previous_response_id=first.id, tools=[TOOL]
    )
    tools = account_of(admin, with_tools.id)["account"]
    assert tools["cause"] == "fingerprint" and tools["changes"] == ["tools"]
    assert tools["divergence"]["region"] == "prompt"  # the tools render before the history
    assert tools["expected_cached"] == tools["measured_cached"]
    assert "tools changed" in tools["explanation"]

    assert admin.post(f"/tenants/{tenant.id}/rotate_salt").status_code == 200
    rotated = client.responses.create(
        model=MODEL, input="After rotation", previous_response_id=with_tools.id, tools=[TOOL]
    )
    salt = account_of(admin, rotated.id)["account"]
    assert salt["cause"] == "fingerprint" and "salt_epoch" in salt["changes"]
    assert salt["token_exact"] is True  # same tokens, another cache
    assert salt["expected_cached"] == salt["measured_cached"] == 0
    assert salt["lost"] == {"fingerprint": salt["parent_tokens"]}
    assert "isolates the prefix cache" in salt["explanation"]


def test_evicted_prefix_is_not_resident(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    sim.push(Reply("kept for a moment"), Reply("after the eviction"))
    first = client.responses.create(model=MODEL, input="Remember this")
    sim.state.cache.clear()
    second = client.responses.create(model=MODEL, input="And now?", previous_response_id=first.id)
    account = account_of(admin, second.id)["account"]
    assert account["status"] == "exact" and account["measured_cached"] == 0
    assert account["cause"] == "not_resident"
    assert account["lost"]["not_resident"] == account["expected_cached"] > 0
    assert "not resident" in account["explanation"]


def test_function_call_round_trip_is_exact_with_a_faithful_template(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    sim.push(ToolCalls([Call("lookup", {"q": "tokens"}, call_id="call_1")]), Reply("Found it."))
    first = client.responses.create(model=MODEL, input="Look up tokens", tools=[TOOL])
    call = first.output[0]
    assert call.type == "function_call"
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}],
    )
    assert account_of(admin, second.id)["account"]["status"] == "exact"


def test_conversation_turns_are_accounted_and_shown_in_the_timeline(
    client: OpenAI, sim: SimServer, admin: httpx.Client, tenant: Any
) -> None:
    sim.push(Reply("one"), Reply("two"))
    conversation = client.conversations.create()
    client.responses.create(model=MODEL, input="First", conversation=conversation.id)
    client.responses.create(model=MODEL, input="Second", conversation=conversation.id)
    timeline = admin.get(f"/tenants/{tenant.id}/conversations/{conversation.id}/timeline").json()
    first, second = timeline["data"]
    assert first["tokens"]["status"] == "cold_start"
    assert second["tokens"]["status"] == "exact"
    assert second["tokens"]["expected_cached"] == second["usage"]["cached_tokens"]
    assert second["tokens"]["explanation"].startswith("Token-exact")


def test_missing_or_inconsistent_ids_never_fail_a_turn(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    # Its own server: after an answer without ids it stops asking for a while.
    with running_server(fresh_db, sim, tmp_path) as custom:
        client = custom.client(create_tenant(fresh_db), timeout=20)
        key = create_admin_key(fresh_db)
        sim.push(Reply("fine"), Reply("short ids", report_tokens="short"), Reply("orphan"))
        sim.push(Reply("no ids", report_tokens="omit"), Reply("not asked"))
        turns = []
        previous = None
        for text in ("One", "Two", "Three", "Four", "Five"):
            previous = client.responses.create(
                model=MODEL,
                input=text,
                previous_response_id=previous.id if previous else omit,
            )
            turns.append(previous)
        asked_last = sim.last("/v1/responses").json.get("enable_response_messages")
        with httpx.Client(
            base_url=f"{custom.url}/admin/v1", headers={"Authorization": f"Bearer {key}"}
        ) as admin:
            shown = [account_of(admin, turn.id) for turn in turns]
    assert all(turn.status == "completed" for turn in turns)
    _, short, orphan, omitted, not_asked = shown
    assert short["account"]["status"] == "unknown" and short["artifact"] is None
    assert "usage.output_tokens" in short["account"]["reason"]
    assert orphan["account"]["status"] == "unknown"
    assert "parent has no token ids" in orphan["account"]["reason"]
    assert orphan["account"]["explanation"].startswith("Token account unknown")
    assert omitted["account"]["status"] == "unknown" and omitted["artifact"] is None
    assert "no token ids" in omitted["account"]["reason"]
    assert asked_last is None and not_asked["account"] is None


def test_a_truncated_artifact_gives_an_unknown_account(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    # No recent artifacts kept in process: every parent's ids are read from storage.
    with running_server(fresh_db, sim, tmp_path, token_artifact_memo_mb=0) as custom:
        client = custom.client(create_tenant(fresh_db), timeout=20)
        sim.push(Reply("soon damaged"), Reply("still answered"))
        first = client.responses.create(model=MODEL, input="Store me")

        async def damage() -> None:
            db = Database.from_url(fresh_db, pool_size=1)
            try:
                async with db.write() as session:
                    await session.execute(
                        text("UPDATE token_artifacts SET prompt_ids = :b WHERE response_id = :id"),
                        {"b": b"\x28\xb5\x2f\xfd\x00", "id": first.id},
                    )
            finally:
                await db.close()

        asyncio.run(damage())
        second = client.responses.create(model=MODEL, input="Go on", previous_response_id=first.id)
        key = create_admin_key(fresh_db)
        account = httpx.get(
            f"{custom.url}/admin/v1/responses/{second.id}/token_account",
            headers={"Authorization": f"Bearer {key}"},
            timeout=20,
        ).json()["account"]
    assert second.status == "completed"
    assert account["status"] == "unknown" and "unreadable" in account["reason"]


def test_delete_removes_the_token_ids(client: OpenAI, sim: SimServer, admin: httpx.Client) -> None:
    sim.push(Reply("to be deleted"))
    first = client.responses.create(model=MODEL, input="Delete me later")
    assert account_of(admin, first.id)["artifact"] is not None
    client.responses.delete(first.id)
    assert account_of(admin, first.id)["artifact"] is None


def test_metrics_count_tokens_by_cause(
    client: OpenAI, sim: SimServer, server: RunningServer
) -> None:
    sim.push(Reply("a\n\nb", newline_pairs_as_one=True), Reply("c"))
    first = client.responses.create(model=MODEL, input="Metrics")
    client.responses.create(model=MODEL, input="More", previous_response_id=first.id)
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert re.search(r'agentic_token_lost_tokens_total\{[^}]*cause="retokenization"', metrics)
    for name in ("reusable", "expected_cached", "measured_cached"):
        assert f"agentic_token_{name}_tokens_total{{" in metrics
    assert re.search(r'agentic_token_accounts_total\{[^}]*status="diverged"', metrics)


def test_a_template_that_drops_tool_calls_is_named(fresh_db: str, tmp_path: Path) -> None:
    with (
        SimServer(template_drops_tool_calls=True) as dropping,
        running_server(fresh_db, dropping, tmp_path) as custom,
    ):
        tenant = create_tenant(fresh_db)
        client = custom.client(tenant, timeout=20)
        key = create_admin_key(fresh_db)
        dropping.push(ToolCalls([Call("lookup", {"q": "x"})]), Reply("done"))
        first = client.responses.create(model=MODEL, input="Use the tool", tools=[TOOL])
        parent_prompt = dropping.last("/v1/responses").prompt_tokens
        call = narrow(first.output[0], ResponseFunctionToolCall)
        second = client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            tools=[TOOL],
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "1"}],
        )
        with httpx.Client(
            base_url=f"{custom.url}/admin/v1",
            headers={"Authorization": f"Bearer {key}"},
            timeout=20,
        ) as admin:
            account = account_of(admin, second.id)["account"]
    assert account["cause"] == "template" and account["status"] == "diverged"
    assert account["divergence"]["offset"] == parent_prompt
    assert account["divergence"]["region"] == "output"
    assert account["divergence"]["realigned"] is False
    assert "dropped or rewrote" in account["explanation"]
    assert "function_call" in account["explanation"]


def test_input_tokens_uses_the_render_endpoint_when_there_is_one(
    fresh_db: str, tmp_path: Path
) -> None:
    with (
        SimServer(enable_scale_out=True) as rendering,
        running_server(fresh_db, rendering, tmp_path) as custom,
    ):
        client = custom.client(create_tenant(fresh_db), timeout=20)
        rendering.push(Reply("context"))
        first = client.responses.create(model=MODEL, input="Some context")
        rendering.state.clear_recordings()
        counted = client.responses.input_tokens.count(
            model=MODEL, input="How many?", previous_response_id=first.id
        )
        assert rendering.calls("/v1/responses") == 0
        assert rendering.calls("/v1/responses/render") == 1
        # The same request, generated, prefills exactly that many tokens.
        rendering.push(Reply("answer"))
        client.responses.create(model=MODEL, input="How many?", previous_response_id=first.id)
        assert rendering.last("/v1/responses").prompt_tokens == counted.input_tokens


def test_input_tokens_falls_back_without_a_render_endpoint(client: OpenAI, sim: SimServer) -> None:
    counted = client.responses.input_tokens.count(model=MODEL, input="Count me")
    assert sim.calls("/v1/responses/render") == 0
    assert sim.last("/v1/responses").json["max_output_tokens"] == 1
    assert counted.input_tokens == sim.last("/v1/responses").prompt_tokens


def test_required_fails_fast_when_the_upstream_gives_no_ids(fresh_db: str, tmp_path: Path) -> None:
    with SimServer(response_messages=False) as old:
        settings = server_settings(fresh_db, old.url, tmp_path, token_artifacts="required")
        with pytest.raises(ConfigError, match="does not return token ids"):
            asyncio.run(build_services(settings))
    # Nothing answering at all is refused the same way.
    settings = server_settings(fresh_db, "http://127.0.0.1:9", tmp_path, token_artifacts="required")
    with pytest.raises(ConfigError, match="could not be probed"):
        asyncio.run(build_services(settings))


def test_auto_learns_that_an_upstream_gives_no_ids(fresh_db: str, tmp_path: Path) -> None:
    with (
        SimServer(response_messages=False) as old,
        running_server(fresh_db, old, tmp_path) as custom,
    ):
        client = custom.client(create_tenant(fresh_db), timeout=20)
        key = create_admin_key(fresh_db)
        old.push(Reply("plain"), Reply("plainer"))
        # Nothing generated at start-up: the probes do not consume scripted replies.
        first = client.responses.create(model=MODEL, input="Hello")
        asked_first = old.last("/v1/responses").json.get("enable_response_messages")
        second = client.responses.create(model=MODEL, input="Again", previous_response_id=first.id)
        asked_second = old.last("/v1/responses").json.get("enable_response_messages")
        shown = [
            httpx.get(
                f"{custom.url}/admin/v1/responses/{r.id}/token_account",
                headers={"Authorization": f"Bearer {key}"},
                timeout=20,
            ).json()
            for r in (first, second)
        ]
    assert first.output_text == "plain" and second.output_text == "plainer"
    assert asked_first is True and asked_second is None
    assert shown[0]["account"]["status"] == "unknown" and shown[0]["artifact"] is None
    assert "no token ids" in shown[0]["account"]["reason"]
    assert shown[1]["account"] is None


def test_off_asks_for_nothing(fresh_db: str, sim: SimServer, tmp_path: Path) -> None:
    with running_server(fresh_db, sim, tmp_path, token_artifacts="off") as custom:
        sim.state.clear_recordings()
        client = custom.client(create_tenant(fresh_db), timeout=20)
        sim.push(Reply("plain"))
        client.responses.create(model=MODEL, input="Hello")
        assert [r.path for r in sim.requests()] == ["/v1/responses"]
        assert "enable_response_messages" not in sim.last("/v1/responses").json


def test_a_background_continuation_is_accounted(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    sim.push(Reply("in the foreground"), Reply("in the background"))
    first = client.responses.create(model=MODEL, input="Foreground first")
    queued = client.responses.create(
        model=MODEL, input="Then queued", previous_response_id=first.id, background=True
    )
    deadline = time.monotonic() + 15
    while client.responses.retrieve(queued.id).status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    shown = account_of(admin, queued.id)
    # Streamed upstream by the worker, committed through the repositories.
    assert sim.last("/v1/responses").json["stream"] is True
    assert shown["account"]["status"] == "exact" and shown["artifact"] is not None
    assert shown["account"]["measured_cached"] == shown["account"]["expected_cached"]
