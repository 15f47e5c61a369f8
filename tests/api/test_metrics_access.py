"""Who may read GET /metrics, and what it says about tenants: open unless a scrape token
is set (then a bearer credential, 401 without it, in OpenAI's shape); tenant ids on the
``tenant`` label only when the operator turns them on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentic_api.metrics import label_tenants
from tests.conftest import RunningServer, running_server
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import SimServer

TOKEN = "scrape-token-0123456789abcdef"
# The families labeled by tenant (tokens, cache hit ratio, token accounts).
TENANT_FAMILIES = (
    "agentic_input_tokens_total",
    "agentic_output_tokens_total",
    "agentic_cache_hit_ratio_count",
    "agentic_token_accounts_total",
)


def _tenant_values(text: str, name: str) -> set[str]:
    return {
        sample.labels["tenant"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def _one_turn(server: RunningServer, tenant: TenantKeys, sim: SimServer) -> None:
    client = server.client(tenant, timeout=20)
    assert client.responses.create(model=sim.config.model, input="count me").status == "completed"


def test_tenant_ids_are_off_the_labels_by_default(
    server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    _one_turn(server, tenant, sim)
    scraped = httpx.get(f"{server.url}/metrics", timeout=10)
    # No token set: open, as before.
    assert scraped.status_code == 200
    for name in TENANT_FAMILIES:
        # Counted under the empty tenant label (Prometheus: no label), never this tenant's
        # id. (The registry is the process's: series other tests labeled stay in it.)
        values = _tenant_values(scraped.text, name)
        assert "" in values and tenant.id not in values, name
    assert tenant.id not in scraped.text


@pytest.fixture
def tenant_labels_reset() -> Iterator[None]:
    # The switch is per process (the metric objects are), and in-process servers share
    # it: give back the default the session's other servers were built with.
    yield
    label_tenants(False)


def test_tenant_ids_label_the_series_when_turned_on(
    db_url: str, sim: SimServer, tmp_path: Path, tenant_labels_reset: None
) -> None:
    with running_server(db_url, sim, tmp_path, metrics_tenant_labels=True) as labeled:
        tenant = create_tenant(db_url)
        _one_turn(labeled, tenant, sim)
        text = httpx.get(f"{labeled.url}/metrics", timeout=10).text
    for name in TENANT_FAMILIES:
        assert tenant.id in _tenant_values(text, name), name


def _assert_refused(response: httpx.Response, code: str) -> None:
    assert response.status_code == 401, response.text
    assert response.json() == {
        "error": {
            "type": "invalid_request_error",
            "code": code,
            "param": None,
            "message": response.json()["error"]["message"],
        }
    }
    assert "agentic_" not in response.text


def test_a_metrics_token_closes_the_scrape_to_everyone_else(
    db_url: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(db_url, sim, tmp_path, metrics_token=TOKEN) as guarded:
        tenant = create_tenant(db_url)
        url = f"{guarded.url}/metrics"
        _assert_refused(httpx.get(url, timeout=10), "missing_api_key")
        _assert_refused(
            httpx.get(url, headers={"authorization": "Bearer wrong-token"}, timeout=10),
            "invalid_api_key",
        )
        # A tenant's own API key is not the scrape token.
        _assert_refused(
            httpx.get(url, headers={"authorization": f"Bearer {tenant.api_key}"}, timeout=10),
            "invalid_api_key",
        )
        _assert_refused(
            httpx.get(url, headers={"authorization": f"Basic {TOKEN}"}, timeout=10),
            "missing_api_key",
        )
        scraped = httpx.get(url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert scraped.status_code == 200
        assert "agentic_turns_total" in scraped.text
        # The rest of the server is unchanged by the token.
        assert httpx.get(f"{guarded.url}/health", timeout=10).status_code == 200
