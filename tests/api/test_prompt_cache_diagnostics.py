"""``prompt_cache_diagnostics`` through the API (SQLite and PostgreSQL): asked for with
``prompt_cache_options.comparison_response_id`` (or by the operator's default against the
parent), answered from the token account on JSON, SSE, retrieve and WebSocket, every
variant validated against the openai SDK's type (``tests/support/strict.py`` checks each
Response the suite receives)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI, omit
from openai.types.responses import Response
from openai.types.responses.response import (
    PromptCacheDiagnosticsCacheHit,
    PromptCacheDiagnosticsCacheMiss,
    PromptCacheDiagnosticsComparisonResponseNotFound,
    PromptCacheDiagnosticsUnavailable,
)

from tests.api.test_token_accounts import TOOL, account_of
from tests.conftest import RunningServer, running_server
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"


@pytest.fixture
def admin(server: RunningServer) -> Iterator[httpx.Client]:
    key = create_admin_key(server.db_url)
    with httpx.Client(
        base_url=f"{server.url}/admin/v1", headers={"Authorization": f"Bearer {key}"}, timeout=20
    ) as http:
        yield http


def compared_with(response_id: str) -> Any:
    return {"comparison_response_id": response_id}


def chain(client: OpenAI, sim: SimServer, turns: int) -> list[Response]:
    made: list[Response] = []
    for turn in range(turns):
        sim.push(Reply(f"Answer {turn}, with enough words to fill a cache block or two."))
        made.append(
            client.responses.create(
                model=MODEL,
                input=f"Question {turn}?",
                previous_response_id=made[-1].id if made else omit,
            )
        )
    return made


def test_a_token_exact_continuation_is_a_hit_on_json_sse_and_retrieve(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    first, second = chain(client, sim, 2)
    # Without the option, nothing is diagnosed (the default is off, as at OpenAI).
    assert second.prompt_cache_diagnostics is None
    sim.push(Reply("streamed third"))
    with client.responses.stream(
        model=MODEL,
        input="Third?",
        previous_response_id=second.id,
        prompt_cache_options=compared_with(second.id),
    ) as events:
        snapshots = [
            event.response.prompt_cache_diagnostics
            for event in events
            if event.type in ("response.created", "response.in_progress")
        ]
        third = events.get_final_response()
    assert snapshots and all(snapshot is None for snapshot in snapshots)
    assert isinstance(third.prompt_cache_diagnostics, PromptCacheDiagnosticsCacheHit)
    account = account_of(admin, third.id)["account"]
    assert account["status"] == "exact" and account["measured_cached"] > 0
    assert third.usage is not None
    assert third.usage.input_tokens_details.cached_tokens == account["measured_cached"]
    assert client.responses.retrieve(third.id).prompt_cache_diagnostics == (
        third.prompt_cache_diagnostics
    )
    # Any of the tenant's responses, not only the parent: the first turn's prompt and
    # output start the third turn's prompt too.
    sim.push(Reply("fourth"))
    fourth = client.responses.create(
        model=MODEL,
        input="Fourth?",
        previous_response_id=third.id,
        prompt_cache_options=compared_with(first.id),
    )
    assert isinstance(fourth.prompt_cache_diagnostics, PromptCacheDiagnosticsCacheHit)
    assert fourth.prompt_cache_options is not None
    assert fourth.prompt_cache_options.comparison_response_id == first.id


def test_a_repeated_prompt_compared_with_a_response_it_does_not_continue_is_a_hit(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    """Issue 38, item 15: the compared response's prompt is the prefix to share; its
    output is not missing from a prompt that never meant to continue it."""
    question = "Summarise the plot of a long novel, with enough words to fill a block or two."
    sim.push(Reply("A first answer."))
    first = client.responses.create(model=MODEL, input=question)
    sim.push(Reply("The same question, answered again."))
    again = client.responses.create(
        model=MODEL, input=question, prompt_cache_options=compared_with(first.id)
    )
    assert again.usage is not None and again.usage.input_tokens_details.cached_tokens > 0
    assert isinstance(again.prompt_cache_diagnostics, PromptCacheDiagnosticsCacheHit)
    # Another question shares only the template's first tokens with it: a miss.
    sim.push(Reply("Another answer."))
    other = client.responses.create(
        model=MODEL,
        input="A different question altogether, about the weather in Lisbon tomorrow.",
        prompt_cache_options=compared_with(first.id),
    )
    assert miss(other).reason == "input_changed"


def miss(response: Response) -> PromptCacheDiagnosticsCacheMiss:
    diagnosed = response.prompt_cache_diagnostics
    assert isinstance(diagnosed, PromptCacheDiagnosticsCacheMiss), diagnosed
    return diagnosed


def test_changed_instructions_and_tools_are_misses_that_agree_with_the_account(
    client: OpenAI, sim: SimServer, admin: httpx.Client
) -> None:
    (first,) = chain(client, sim, 1)
    sim.push(Reply("other instructions"), Reply("with a tool"))
    instructed = client.responses.create(
        model=MODEL,
        input="Again?",
        instructions="Answer in French.",
        previous_response_id=first.id,
        prompt_cache_options=compared_with(first.id),
    )
    diagnosed = miss(instructed)
    assert diagnosed.reason == "input_changed"
    account = account_of(admin, instructed.id)["account"]
    assert account["cause"] == "fingerprint" and account["changes"] == ["instructions"]
    assert diagnosed.comparison_reusable_tokens == account["reusable_tokens"]
    assert diagnosed.cache_missed_tokens == account["prompt_tokens"] - account["measured_cached"]
    tooled = client.responses.create(
        model=MODEL,
        input="And a tool?",
        tools=[TOOL],
        previous_response_id=first.id,
        prompt_cache_options=compared_with(first.id),
    )
    assert miss(tooled).reason == "tools_changed"


def test_an_evicted_prefix_is_a_miss_never_a_hit(client: OpenAI, sim: SimServer) -> None:
    (first,) = chain(client, sim, 1)
    sim.state.cache.clear()
    sim.push(Reply("after the eviction"))
    evicted = client.responses.create(
        model=MODEL,
        input="Still there?",
        previous_response_id=first.id,
        prompt_cache_options=compared_with(first.id),
    )
    diagnosed = miss(evicted)
    assert diagnosed.reason == "prompt_cache_key_changed"
    assert evicted.usage is not None
    assert diagnosed.cache_missed_tokens == evicted.usage.input_tokens


def test_another_tenants_response_or_an_unknown_id_is_not_found(
    client: OpenAI, sim: SimServer, server: RunningServer
) -> None:
    other = server.client(create_tenant(server.db_url), timeout=20)
    sim.push(Reply("theirs"), Reply("ours"), Reply("ours again"))
    theirs = other.responses.create(model=MODEL, input="Private?")
    for compared in (theirs.id, "resp_nothing_by_this_id"):
        answer = client.responses.create(
            model=MODEL, input="Hello", prompt_cache_options=compared_with(compared)
        )
        assert isinstance(
            answer.prompt_cache_diagnostics, PromptCacheDiagnosticsComparisonResponseNotFound
        )


def test_without_token_ids_diagnostics_are_unavailable(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(fresh_db, sim, tmp_path, token_artifacts="off") as custom:
        client = custom.client(create_tenant(fresh_db), timeout=20)
        sim.push(Reply("one"), Reply("two"))
        first = client.responses.create(model=MODEL, input="One")
        second = client.responses.create(
            model=MODEL,
            input="Two",
            previous_response_id=first.id,
            prompt_cache_options=compared_with(first.id),
        )
    assert isinstance(second.prompt_cache_diagnostics, PromptCacheDiagnosticsUnavailable)


def test_the_operator_default_diagnoses_every_continuation_against_its_parent(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(fresh_db, sim, tmp_path, prompt_cache_diagnostics_default=True) as custom:
        client = custom.client(create_tenant(fresh_db), timeout=20)
        first, second = chain(client, sim, 2)
    assert first.prompt_cache_diagnostics is None  # no parent, nothing to compare
    assert isinstance(second.prompt_cache_diagnostics, PromptCacheDiagnosticsCacheHit)


def test_websocket_responses_carry_the_diagnostics(
    client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    (first,) = chain(client, sim, 1)
    sim.push(Reply("over the socket"))
    with client.responses.connect() as connection:
        connection.response.create(
            model=MODEL,
            input="Socket?",
            previous_response_id=first.id,
            prompt_cache_options={"comparison_response_id": first.id},
        )
        final = None
        for event in connection:
            assert event.type != "error", event
            if event.type == "response.completed":
                final = event.response
                break
    assert final is not None
    assert isinstance(final.prompt_cache_diagnostics, PromptCacheDiagnosticsCacheHit)
