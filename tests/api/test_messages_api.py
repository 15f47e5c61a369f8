"""The Anthropic Messages API, driven with the official ``anthropic`` SDK: create, stream,
tools, count_tokens; Anthropic's auth and error conventions; the tenant's salt, the
session header and the client's bytes on the way upstream; recording on and off."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lineage import mint_cache_salt, resolve_stateless_session
from tests.conftest import TEST_SECRET, RunningServer, running_server
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.support.typed import narrow, served_cached_tokens
from tests.upstream_sim import Call, Disconnect, Reply, SimServer, StreamError, ToolCalls
from tests.upstream_sim.messages_api import render_messages
from tests.upstream_sim.tokenizer import tokenize

VERSION = "2023-06-01"
LONG = "Tell me about prefix caching in great detail, please. " * 6
TOOLS: list[Any] = [
    {
        "name": "get_goal",
        "description": "Reads the goal.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def sdk(server: RunningServer, tenant: TenantKeys, **kwargs: Any) -> anthropic.Anthropic:
    options: dict[str, Any] = {"api_key": tenant.api_key, **kwargs}
    return anthropic.Anthropic(base_url=server.url, max_retries=0, timeout=20, **options)


@pytest.fixture
def claude(server: RunningServer, tenant: TenantKeys) -> Iterator[anthropic.Anthropic]:
    with sdk(server, tenant) as client:
        yield client


def post(
    server: RunningServer,
    tenant: TenantKeys | None,
    body: bytes | dict[str, Any],
    *,
    path: str = "/v1/messages",
    **headers: str,
) -> httpx.Response:
    sent = {"content-type": "application/json", "anthropic-version": VERSION}
    if tenant is not None:
        sent["x-api-key"] = tenant.api_key
    sent.update({k.replace("_", "-"): v for k, v in headers.items()})
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(server.url + path, content=data, headers=sent, timeout=20)


def salt_of(tenant: TenantKeys) -> str:
    return mint_cache_salt(TEST_SECRET.encode(), tenant.id, 1)


def prompt_tokens(usage: Any) -> int:
    """The whole prompt, as Anthropic splits it: input, cache read, cache creation."""
    return int(
        usage.input_tokens
        + (usage.cache_read_input_tokens or 0)
        + (usage.cache_creation_input_tokens or 0)
    )


def assert_anthropic_error(response: httpx.Response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == error_type
    message: str = body["error"]["message"]
    assert message
    return message


# -- create, stream, tools, count_tokens ----------------------------------------------------


def test_create_answers_with_the_upstream_message(
    claude: anthropic.Anthropic, sim: SimServer, tenant: TenantKeys
) -> None:
    sim.push(Reply("Prefix caching keeps computed blocks."))
    message = claude.messages.create(
        model=sim.config.model,
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": LONG}],
    )
    assert message.type == "message" and message.role == "assistant"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Prefix caching keeps computed blocks."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    upstream = sim.last("/v1/messages")
    assert upstream.json.get("stream") in (None, False)
    assert upstream.json["cache_salt"] == salt_of(tenant)
    assert prompt_tokens(message.usage) == upstream.prompt_tokens
    assert message.usage.output_tokens == upstream.output_tokens
    # The client's key is ours; the model server never sees it.
    assert "x-api-key" not in upstream.headers
    # The version the SDK sent, passed on.
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", upstream.headers["anthropic-version"])


def test_stream_relays_the_upstream_events_in_order(
    claude: anthropic.Anthropic, sim: SimServer
) -> None:
    sim.push(Reply("one two three"))
    with claude.messages.stream(
        model=sim.config.model, max_tokens=64, messages=[{"role": "user", "content": LONG}]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[-2] == "message_delta"
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 1
    assert "content_block_delta" in kinds
    assert final.content[0].text == "one two three"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    upstream = sim.last("/v1/messages")
    assert upstream.json["stream"] is True
    assert final.usage.output_tokens == upstream.output_tokens


def test_raw_stream_frames_are_the_upstreams(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    sim.push(ToolCalls([Call("get_goal", {"path": "goal.txt"})], reasoning="think first"))
    body = {
        "model": sim.config.model,
        "max_tokens": 64,
        "stream": True,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": LONG}],
    }
    with httpx.stream(
        "POST",
        server.url + "/v1/messages",
        json=body,
        headers={"x-api-key": tenant.api_key, "anthropic-version": VERSION},
        timeout=20,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        ours = b"".join(response.iter_bytes())
    events = [block for block in ours.decode().split("\n\n") if block]
    names = [block.split("\n", 1)[0].removeprefix("event: ") for block in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-2:] == ["message_delta", "message_stop"]
    starts = [
        json.loads(block.split("data: ", 1)[1])["content_block"]["type"]
        for block in events
        if block.startswith("event: content_block_start")
    ]
    assert starts == ["thinking", "tool_use"]
    # Each frame names its event as the upstream did, with that event's data.
    for block in events:
        data = json.loads(block.split("data: ", 1)[1])
        assert data["type"] == block.split("\n", 1)[0].removeprefix("event: ")


def test_a_tool_round_trip_reuses_the_cached_prefix(
    claude: anthropic.Anthropic, sim: SimServer
) -> None:
    sim.push(
        ToolCalls([Call("get_goal", {"path": "goal.txt"}, call_id="toolu_1")]),
        Reply("The goal is 42."),
    )
    history: list[Any] = [{"role": "user", "content": LONG}]
    first = claude.messages.create(
        model=sim.config.model, max_tokens=64, tools=TOOLS, messages=history
    )
    assert first.stop_reason == "tool_use"
    call = first.content[0]
    assert call.type == "tool_use" and call.name == "get_goal" and call.id == "toolu_1"
    assert call.input == {"path": "goal.txt"}
    history += [
        {
            "role": "assistant",
            "content": [block.model_dump(exclude_none=True) for block in first.content],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}],
        },
    ]
    second = claude.messages.create(
        model=sim.config.model, max_tokens=64, tools=TOOLS, messages=history
    )
    assert second.content[0].text == "The goal is 42."  # type: ignore[union-attr]
    calls = sim.requests("/v1/messages")
    assert [c.json["messages"] for c in calls] == [history[:1], history]
    assert calls[0].headers["x-session-id"] == calls[1].headers["x-session-id"]
    assert calls[0].json["cache_salt"] == calls[1].json["cache_salt"]
    # The first turn's prompt and output are a prefix of the second's: cached blocks.
    assert second.usage.cache_read_input_tokens == calls[1].cached_tokens
    assert served_cached_tokens(calls[1]) >= (
        narrow(calls[0].prompt_tokens, int) - sim.config.block_size
    )


def test_count_tokens_is_the_upstreams_count_and_runs_nothing(
    claude: anthropic.Anthropic, sim: SimServer
) -> None:
    messages: list[Any] = [{"role": "user", "content": LONG}]
    counted = claude.messages.count_tokens(
        model=sim.config.model, system="Be brief.", tools=TOOLS, messages=messages
    )
    body = {"model": sim.config.model, "system": "Be brief.", "tools": TOOLS, "messages": messages}
    assert counted.input_tokens == len(tokenize(render_messages(body).text))
    assert sim.calls("/v1/messages") == 0
    assert sim.last("/v1/messages/count_tokens").json["messages"] == messages


def test_bearer_auth_is_accepted_too(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with anthropic.Anthropic(
        base_url=server.url, auth_token=tenant.api_key, max_retries=0, timeout=20
    ) as client:
        message = client.messages.create(
            model=sim.config.model, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert message.type == "message"
    # Nor does the model server see the tenant's key when it came as a bearer token.
    assert "authorization" not in sim.last("/v1/messages").headers


# -- what goes upstream -----------------------------------------------------------------------


def test_the_body_goes_upstream_as_sent_but_for_the_salt(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    # Odd spacing, a number spelled 1.0e0, escapes and cache_control markers: all kept.
    sent = (
        '{ "model" : "MODEL",\n  "max_tokens": 16, "temperature": 1.0e0,'
        ' "cache_salt": "client-chosen",'
        ' "system": [{"type": "text", "text": "S\\u00e9", "cache_control": {"type": "ephemeral"}}],'
        ' "messages": [{"role": "user", "content": [{"type": "text", "text": "hi",'
        ' "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}] }'
    ).replace("MODEL", sim.config.model)
    response = post(server, tenant, sent.encode())
    assert response.status_code == 200, response.text
    forwarded = sim.last("/v1/messages").body.decode()
    # The client's salt member is cut out with its separator; ours goes last.
    kept = sent.replace('"cache_salt": "client-chosen", ', "")
    assert forwarded == kept.removesuffix(" }") + f',"cache_salt":"{salt_of(tenant)}" }}'


def test_two_tenants_never_share_a_salt_and_client_salts_are_dropped(
    server: RunningServer, sim: SimServer
) -> None:
    one, two = create_tenant(server.db_url), create_tenant(server.db_url)
    salts = []
    for tenant in (one, two, one):
        body = {
            "model": sim.config.model,
            "max_tokens": 8,
            "cache_salt": "shared-by-the-clients",
            "messages": [{"role": "user", "content": LONG}],
        }
        assert post(server, tenant, body).status_code == 200
        salts.append(sim.last("/v1/messages").json["cache_salt"])
    assert salts[0] == salts[2] == salt_of(one)
    assert salts[1] == salt_of(two) != salts[0]
    assert "shared-by-the-clients" not in salts
    # Same prompt, other tenant: nothing cached across the salts.
    assert sim.requests("/v1/messages")[1].cached_tokens == 0
    assert served_cached_tokens(sim.requests("/v1/messages")[2]) > 0


def test_session_header_from_claude_code_then_user_then_content(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    base: dict[str, Any] = {
        "model": sim.config.model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "a"}],
    }

    def session(body: dict[str, Any], **headers: str) -> str:
        assert post(server, tenant, body, **headers).status_code == 200
        return sim.last("/v1/messages").headers["x-session-id"]

    by_header = session(
        {**base, "metadata": {"user_id": "u1"}}, x_claude_code_session_id="cc-session-1"
    )
    assert (
        by_header
        == resolve_stateless_session(tenant_id=tenant.id, client_session_id="cc-session-1")[0]
    )
    by_user = session({**base, "metadata": {"user_id": "u1"}})
    assert by_user == resolve_stateless_session(tenant_id=tenant.id, user_id="u1")[0]
    by_content = session(base)
    grown = {
        **base,
        "messages": [
            *base["messages"],
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    }
    # A growing history keeps its session (only the first messages decide it).
    assert session(grown) == by_content
    assert len({by_header, by_user, by_content}) == 3
    other = create_tenant(server.db_url)
    assert post(server, other, base).status_code == 200
    assert sim.last("/v1/messages").headers["x-session-id"] != by_content


def test_anthropic_headers_pass_through(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    body = {
        "model": sim.config.model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "a"}],
    }
    beta = "claude-code-20250219,interleaved-thinking-2025-05-14"
    response = post(server, tenant, body, path="/v1/messages?beta=true", anthropic_beta=beta)
    assert response.status_code == 200
    upstream = sim.last("/v1/messages")
    assert upstream.headers["anthropic-beta"] == beta
    assert upstream.headers["anthropic-version"] == VERSION


# -- errors -------------------------------------------------------------------------------------


def test_missing_and_wrong_keys_are_authentication_errors(
    server: RunningServer, sim: SimServer
) -> None:
    body: dict[str, Any] = {
        "model": sim.config.model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "a"}],
    }
    assert_anthropic_error(post(server, None, body), 401, "authentication_error")
    assert_anthropic_error(
        post(server, None, body, x_api_key="sk-wrong"), 401, "authentication_error"
    )
    with (
        anthropic.Anthropic(base_url=server.url, api_key="sk-wrong", max_retries=0) as client,
        pytest.raises(anthropic.AuthenticationError) as raised,
    ):
        client.messages.create(model=sim.config.model, max_tokens=8, messages=body["messages"])
    assert raised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert sim.calls("/v1/messages") == 0


ONE = b'"messages": [{"role": "user", "content": "a"}]'
BAD_BODIES: list[tuple[str, bytes]] = [
    ("not json", b"{nope"),
    ("not an object", b"[1, 2]"),
    ("NaN is not JSON", b'{"model": "m", "max_tokens": NaN, ' + ONE + b"}"),
    ("missing model", b'{"max_tokens": 8, ' + ONE + b"}"),
    ("missing max_tokens", b'{"model": "m", ' + ONE + b"}"),
    ("zero max_tokens", b'{"model": "m", "max_tokens": 0, ' + ONE + b"}"),
    ("no messages", b'{"model": "m", "max_tokens": 8, "messages": []}'),
    (
        "bad role",
        b'{"model": "m", "max_tokens": 8, "messages": [{"role": "boss", "content": "a"}]}',
    ),
    (
        "block without type",
        b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [{}]}]}',
    ),
    ("stream not a bool", b'{"model": "m", "max_tokens": 8, "stream": "yes", ' + ONE + b"}"),
    ("tool without name", b'{"model": "m", "max_tokens": 8, "tools": [{}], ' + ONE + b"}"),
    (
        "user_id too long",
        b'{"model": "m", "max_tokens": 8, "metadata": {"user_id": "'
        + b"u" * 257
        + b'"}, '
        + ONE
        + b"}",
    ),
    ("invalid utf-8", b'{"model": "\xff", "max_tokens": 8, ' + ONE + b"}"),
]


@pytest.mark.parametrize(("name", "body"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_bodies_are_refused_before_the_upstream(
    server: RunningServer, tenant: TenantKeys, sim: SimServer, name: str, body: bytes
) -> None:
    assert_anthropic_error(post(server, tenant, body), 400, "invalid_request_error")
    assert sim.calls("/v1/messages") == 0


def test_the_version_header_is_required(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    body = {
        "model": sim.config.model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "a"}],
    }
    response = httpx.post(
        server.url + "/v1/messages", json=body, headers={"x-api-key": tenant.api_key}
    )
    assert "anthropic-version" in assert_anthropic_error(response, 400, "invalid_request_error")
    response = post(server, tenant, body, anthropic_version="latest")
    assert_anthropic_error(response, 400, "invalid_request_error")
    assert sim.calls("/v1/messages") == 0


def test_upstream_refusals_keep_their_status_in_anthropics_shape(
    claude: anthropic.Anthropic, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        claude.messages.create(
            model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "a"}]
        )
    assert raised.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "no-such-model" in raised.value.message
    response = post(
        server,
        tenant,
        {"model": "no-such-model", "messages": [{"role": "user", "content": "a"}]},
        path="/v1/messages/count_tokens",
    )
    assert_anthropic_error(response, 404, "not_found_error")


def test_unknown_routes_under_messages_answer_in_anthropics_shape(
    server: RunningServer, tenant: TenantKeys
) -> None:
    response = post(server, tenant, {}, path="/v1/messages/batches")
    assert_anthropic_error(response, 404, "not_found_error")
    # The Responses API keeps OpenAI's shape.
    openai_shaped = httpx.post(server.url + "/v1/responses", json={}, headers={})
    assert openai_shaped.status_code == 401 and "type" not in openai_shaped.json()


def test_a_stream_that_breaks_ends_with_an_error_event(
    claude: anthropic.Anthropic, sim: SimServer
) -> None:
    for behavior in (
        StreamError(after_events=3, message="engine died"),
        Disconnect(after_events=3, reply=Reply("a b c d e f")),
    ):
        sim.push(behavior)
        with (
            pytest.raises(anthropic.APIStatusError) as raised,
            claude.messages.stream(
                model=sim.config.model, max_tokens=64, messages=[{"role": "user", "content": LONG}]
            ) as stream,
        ):
            for _ in stream:
                pass
        assert raised.value.body["type"] == "error"  # type: ignore[index]


def test_bodies_over_the_limit_are_413_in_anthropics_shape(
    db_url: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(db_url, sim, tmp_path, max_body_bytes=2000) as small:
        tenant = create_tenant(db_url)
        body = {
            "model": sim.config.model,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "x" * 5000}],
        }
        assert_anthropic_error(post(small, tenant, body), 413, "request_too_large")
    assert sim.calls("/v1/messages") == 0


# -- recording, admin views, metrics ---------------------------------------------------------


def admin_get(server: RunningServer, admin: str, path: str, **params: Any) -> Any:
    response = httpx.get(
        f"{server.url}/admin/v1{path}",
        params=params,
        headers={"authorization": f"Bearer {admin}"},
        timeout=20,
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_nothing_is_recorded_by_default(
    claude: anthropic.Anthropic, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    claude.messages.create(
        model=sim.config.model, max_tokens=8, messages=[{"role": "user", "content": "a"}]
    )
    admin = create_admin_key(server.db_url)
    assert admin_get(server, admin, f"/tenants/{tenant.id}/message_turns")["data"] == []
    stats = admin_get(server, admin, f"/tenants/{tenant.id}/cache_stats", api="messages")
    assert stats["total"]["turns"] == 0


def test_recorded_turns_feed_the_admin_views_and_are_purged(
    db_url: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(db_url, sim, tmp_path, messages_record_turns=True) as recording:
        tenant = create_tenant(db_url)
        other = create_tenant(db_url)
        admin = create_admin_key(db_url)
        history: list[Any] = [{"role": "user", "content": LONG}]
        sim.push(Reply("first answer"), Reply("second answer"), Reply("other's answer"))
        with sdk(recording, tenant) as client, sdk(recording, other) as other_client:
            first = client.messages.create(model=sim.config.model, max_tokens=32, messages=history)
            history += [
                {"role": "assistant", "content": "first answer"},
                {"role": "user", "content": "and more?"},
            ]
            with client.messages.stream(
                model=sim.config.model, max_tokens=32, messages=history
            ) as stream:
                second = stream.get_final_message()
            other_client.messages.create(
                model=sim.config.model, max_tokens=32, messages=history[:1]
            )
        turns = admin_get(recording, admin, f"/tenants/{tenant.id}/message_turns")["data"]
        assert [t["stream"] for t in turns] == [False, True]
        assert {t["status"] for t in turns} == {"completed"}
        assert [t["message_id"] for t in turns] == [first.id, second.id]
        assert [t["message_count"] for t in turns] == [1, 3]
        assert turns[0]["session_id"] == turns[1]["session_id"]
        assert turns[0]["session_source"] == "content"
        assert turns[1]["cached_tokens"] == narrow(second.usage.cache_read_input_tokens, int) > 0
        assert turns[1]["input_tokens"] == prompt_tokens(second.usage)
        assert turns[1]["cache_creation_tokens"] == second.usage.cache_creation_input_tokens
        assert turns[1]["output_tokens"] == second.usage.output_tokens
        by_session = admin_get(
            recording,
            admin,
            f"/tenants/{tenant.id}/message_turns",
            session_id=turns[0]["session_id"],
        )
        assert [t["id"] for t in by_session["data"]] == [t["id"] for t in turns]
        stats = admin_get(recording, admin, f"/tenants/{tenant.id}/cache_stats", api="messages")
        assert stats["total"]["turns"] == 2 and stats["api"] == "messages"
        assert stats["total"]["cached_tokens"] == turns[1]["cached_tokens"]
        assert (
            admin_get(recording, admin, f"/tenants/{tenant.id}/cache_stats")["total"]["turns"] == 2
        )
        assert (
            admin_get(recording, admin, f"/tenants/{tenant.id}/cache_stats", api="responses")[
                "total"
            ]["turns"]
            == 0
        )
        purged = httpx.delete(
            f"{recording.url}/admin/v1/tenants/{tenant.id}/data",
            headers={"authorization": f"Bearer {admin}"},
        ).json()
        assert purged["deleted"]["message_turns"] == 2
        assert admin_get(recording, admin, f"/tenants/{tenant.id}/message_turns")["data"] == []
        # The other tenant's record is its own, and survives.
        assert len(admin_get(recording, admin, f"/tenants/{other.id}/message_turns")["data"]) == 1


def test_refused_requests_are_not_recorded(db_url: str, sim: SimServer, tmp_path: Path) -> None:
    with running_server(db_url, sim, tmp_path, messages_record_turns=True) as recording:
        tenant = create_tenant(db_url)
        admin = create_admin_key(db_url)
        bad = {"model": sim.config.model, "messages": [{"role": "user", "content": "a"}]}
        assert post(recording, tenant, bad).status_code == 400
        unknown = {**bad, "model": "no-such-model", "max_tokens": 8}
        assert post(recording, tenant, unknown).status_code == 404
        sim.push(StreamError(after_events=2))
        broken = {**bad, "max_tokens": 8, "stream": True}
        assert post(recording, tenant, broken).status_code == 200
        turns = admin_get(recording, admin, f"/tenants/{tenant.id}/message_turns")["data"]
        assert [t["status"] for t in turns] == ["failed"]


def scrape(server: RunningServer) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_are_labelled_by_api(
    claude: anthropic.Anthropic, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    before = scrape(server)
    history: list[Any] = [{"role": "user", "content": LONG}]
    claude.messages.create(model=model, max_tokens=64, messages=history)
    with claude.messages.stream(
        model=model,
        max_tokens=64,
        messages=[
            *history,
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "y"},
        ],
    ) as stream:
        second = stream.get_final_message()
    # Cut off by max_tokens: an incomplete turn.
    claude.messages.create(model=model, max_tokens=2, messages=[{"role": "user", "content": "z"}])
    after = scrape(server)

    def delta(name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("agentic_turns_total", api="messages", model=model, status="incomplete") == 1
    mine = {"api": "messages", "model": model, "tenant": ""}
    assert delta("agentic_turns_total", api="messages", model=model, status="completed") == 2
    assert delta("agentic_turns_total", api="responses", model=model, status="completed") == 0
    cached = second.usage.cache_read_input_tokens or 0
    assert delta("agentic_cached_tokens_total", **mine) == cached
    assert delta("agentic_cache_hit_ratio_count", **mine) == 3
    assert delta("agentic_time_to_first_token_seconds_count", api="messages", model=model) == 1
    assert delta("agentic_upstream_duration_seconds_count", api="messages", model=model) == 3
    ok = {"method": "POST", "route": "/v1/messages", "status": "200"}
    assert delta("agentic_http_requests_total", **ok) == 3


def test_lost_answers_and_clients_who_leave_are_recorded_as_such(
    db_url: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(
        db_url, sim, tmp_path, messages_record_turns=True, stream_disconnect="cancel"
    ) as recording:
        tenant = create_tenant(db_url)
        admin = create_admin_key(db_url)
        body = {
            "model": sim.config.model,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": LONG}],
        }
        # The upstream drops the connection after taking the request: a 502, a failed turn.
        sim.push(Disconnect())
        assert_anthropic_error(post(recording, tenant, body), 502, "api_error")
        # A streaming client leaves after the first event: the upstream request is closed.
        sim.push(Reply("slow " * 40, event_delay=0.05))
        with httpx.stream(
            "POST",
            recording.url + "/v1/messages",
            json={**body, "stream": True},
            headers={"x-api-key": tenant.api_key, "anthropic-version": VERSION},
            timeout=20,
        ) as response:
            assert next(response.iter_lines()).startswith("event: message_start")
        assert sim.wait_aborted(1, timeout=10)

        def statuses() -> list[str]:
            data = admin_get(recording, admin, f"/tenants/{tenant.id}/message_turns")["data"]
            return [t["status"] for t in data]

        # The cancelled turn is recorded by its task, after the client has gone.
        deadline = time.monotonic() + 10
        while len(statuses()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert statuses() == ["failed", "cancelled"]
