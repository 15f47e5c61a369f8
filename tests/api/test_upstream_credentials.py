"""When the model server refuses *our* upstream key (vLLM's ``--api-key``, simulated),
the tenant gets a 502 that names the upstream, never a 401 that would make their SDK
blame their own key; on every route that calls the model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from openai import APIStatusError, AuthenticationError, OpenAI, PermissionDeniedError

from tests.conftest import RunningServer, app_server
from tests.support.clients import openai_client
from tests.support.tenants import TenantKeys, create_tenant
from tests.support.websocket import open_socket, until_terminal
from tests.upstream_sim import Fail, SimServer

UPSTREAM_KEY = "upstream-key-the-model-server-expects"


@pytest.fixture(scope="module")
def guarded_sim() -> Iterator[SimServer]:
    with SimServer(api_key=UPSTREAM_KEY) as server:
        yield server


def assert_upstream_refused_our_key(error: APIStatusError) -> None:
    assert not isinstance(error, AuthenticationError)
    assert error.status_code == 502
    assert error.code == "upstream_authentication_failed"
    assert error.type == "server_error"
    assert "upstream credentials" in error.message
    assert "HTTP 401" in error.message


def test_a_refused_upstream_key_is_a_502_on_the_responses_routes(
    backend: str, db_url: str, guarded_sim: SimServer, tmp_path: Path
) -> None:
    tenant = create_tenant(db_url)
    model = guarded_sim.config.model
    with app_server(backend, db_url, guarded_sim.url, tmp_path, upstream_api_key="wrong") as live:
        client = openai_client(f"{live.url}/v1", tenant.api_key, timeout=20)
        with pytest.raises(APIStatusError) as plain:
            client.responses.create(model=model, input="x")
        assert_upstream_refused_our_key(plain.value)
        with pytest.raises(APIStatusError) as streamed:
            client.responses.create(model=model, input="x", stream=True)
        assert_upstream_refused_our_key(streamed.value)
        with pytest.raises(APIStatusError) as listed:
            client.models.list()
        assert_upstream_refused_our_key(listed.value)
        _assert_socket_frame(live, tenant, model)
    # The gateway did send a key; it was the wrong one.
    sent = guarded_sim.last("/v1/responses").headers
    assert sent["authorization"] == "Bearer wrong"


def _assert_socket_frame(live: RunningServer, tenant: TenantKeys, model: str) -> None:
    with open_socket(live, tenant) as socket:
        socket.send(json.dumps({"type": "response.create", "model": model, "input": "x"}))
        frames = until_terminal(socket)
    assert [f["type"] for f in frames] == ["error"]
    assert frames[0]["status"] == 502
    assert frames[0]["error"]["code"] == "upstream_authentication_failed"


def test_a_refused_upstream_key_is_a_502_api_error_on_messages(
    backend: str, db_url: str, guarded_sim: SimServer, tmp_path: Path
) -> None:
    tenant = create_tenant(db_url)
    with (
        app_server(backend, db_url, guarded_sim.url, tmp_path, upstream_api_key="wrong") as live,
        anthropic.Anthropic(
            base_url=live.url, api_key=tenant.api_key, max_retries=0, timeout=20
        ) as claude,
        pytest.raises(anthropic.APIStatusError) as raised,
    ):
        claude.messages.create(
            model=guarded_sim.config.model,
            max_tokens=8,
            messages=[{"role": "user", "content": "a"}],
        )
    assert not isinstance(raised.value, anthropic.AuthenticationError)
    assert raised.value.status_code == 502
    body = raised.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "api_error"
    assert "upstream credentials" in body["error"]["message"]


def test_the_right_upstream_key_is_accepted(
    backend: str, db_url: str, guarded_sim: SimServer, tmp_path: Path
) -> None:
    """The simulator's check is real: with the key it expects, the same turn runs."""
    tenant = create_tenant(db_url)
    with app_server(
        backend, db_url, guarded_sim.url, tmp_path, upstream_api_key=UPSTREAM_KEY
    ) as live:
        client = openai_client(f"{live.url}/v1", tenant.api_key, timeout=20)
        answer = client.responses.create(model=guarded_sim.config.model, input="fine")
    assert answer.status == "completed"


def test_a_forbidden_answer_to_our_key_is_a_502_too(client: OpenAI, sim: SimServer) -> None:
    """A gateway or router in front of vLLM that refuses our key's permissions (403)."""
    sim.push(Fail(status=403, message="this key may not use the model"))
    with pytest.raises(APIStatusError) as raised:
        client.responses.create(model=sim.config.model, input="x")
    assert not isinstance(raised.value, PermissionDeniedError)
    assert raised.value.status_code == 502
    assert raised.value.code == "upstream_authentication_failed"
    assert "403" in raised.value.message
    assert "this key may not use the model" in raised.value.message
