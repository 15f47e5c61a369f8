"""GET /metrics: the counters and histograms move the way a turn says they should."""

from __future__ import annotations

import httpx
import pytest
from openai import NotFoundError, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.support.typed import cached_tokens, usage_of
from tests.upstream_sim import Reply, SimServer

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: RunningServer) -> Samples:
    response = httpx.get(f"{server.url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_a_continuation_moves_the_turn_token_and_request_metrics(
    server: RunningServer, client: OpenAI, tenant: TenantKeys, sim: SimServer
) -> None:
    model = sim.config.model
    before = scrape(server)
    sim.push(Reply("first answer"), Reply("second answer"))
    first = client.responses.create(model=model, input="tell me a long story " * 20)
    second = client.responses.create(model=model, input="more", previous_response_id=first.id)
    after = scrape(server)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("agentic_turns_total", api="responses", model=model, status="completed") == 2
    # Tenant ids stay off the labels by default (tests/api/test_metrics_access.py).
    mine = {"api": "responses", "model": model, "tenant": ""}
    assert delta("agentic_input_tokens_total", **mine) == (
        usage_of(first).input_tokens + usage_of(second).input_tokens
    )
    cached = cached_tokens(second)
    assert cached > 0
    assert delta("agentic_cached_tokens_total", **mine) == cached
    assert delta("agentic_cache_hit_ratio_count", **mine) == 2
    assert (
        abs(delta("agentic_cache_hit_ratio_sum", **mine) - cached / usage_of(second).input_tokens)
        < 1e-9
    )
    # The continuation rebuilt the first turn's input and output from storage.
    assert delta("agentic_rehydrated_items_count") == 2
    assert delta("agentic_rehydrated_items_sum") == 1 + len(first.output)
    assert delta("agentic_turn_commit_seconds_count") == 2
    assert delta("agentic_upstream_duration_seconds_count", api="responses", model=model) == 2
    # Non-streamed turns take one JSON answer from the upstream: no first-token time.
    assert delta("agentic_time_to_first_token_seconds_count", api="responses", model=model) == 0
    assert delta("agentic_db_transaction_seconds_count", kind="write") >= 2
    assert delta("agentic_db_statements_total") > 0
    ok = {"method": "POST", "route": "/v1/responses", "status": "200"}
    assert delta("agentic_http_requests_total", **ok) == 2


def test_refused_turns_streams_and_unknown_routes_are_counted(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    before = scrape(server)
    with client.responses.stream(model=sim.config.model, input="stream it") as stream:
        for _ in stream:
            pass
    first_token = {"api": "responses", "model": sim.config.model}
    ttft = value(scrape(server), "agentic_time_to_first_token_seconds_count", **first_token)
    assert ttft - value(before, "agentic_time_to_first_token_seconds_count", **first_token) == 1
    with pytest.raises(NotFoundError):
        client.responses.create(model="no-such-model", input="x")
    httpx.get(f"{server.url}/nowhere/{'x' * 10}")
    after = scrape(server)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert (
        delta("agentic_turns_total", api="responses", model="no-such-model", status="rejected") == 1
    )
    assert (
        delta("agentic_turns_total", api="responses", model=sim.config.model, status="completed")
        == 1
    )
    assert value(after, "agentic_streams_in_flight") == value(before, "agentic_streams_in_flight")
    assert delta("agentic_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert (
        delta(
            "agentic_http_requests_total",
            method="POST",
            route="/v1/responses",
            status="404",
        )
        == 1
    )
