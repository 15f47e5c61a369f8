"""What clients see when the model server fails, and that failures never become
continuable checkpoints."""

from __future__ import annotations

import httpx
import pytest
from openai import APIStatusError, BadRequestError, OpenAI
from openai.types.responses import ResponseFailedEvent

from agentic_api.app import create_app
from tests.conftest import RunningServer, server_settings
from tests.support.servers import ThreadedServer, free_port
from tests.support.tenants import create_tenant
from tests.support.typed import narrow
from tests.upstream_sim import Disconnect, Fail, Hang, Reply, SimServer, StreamError


def test_upstream_killed_mid_stream_fails_the_response_and_keeps_the_head(
    client: OpenAI, sim: SimServer
) -> None:
    head = client.responses.create(model=sim.config.model, input="a stable head")
    sim.push(Disconnect(after_events=4, reply=Reply("this answer never finishes")))
    events = list(
        client.responses.create(
            model=sim.config.model, input="go", previous_response_id=head.id, stream=True
        )
    )
    types = [e.type for e in events]
    assert types[-2:] == ["error", "response.failed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    failed = narrow(events[-1], ResponseFailedEvent).response
    assert failed.status == "failed"
    assert failed.error is not None and "ended before" in failed.error.message
    stored = client.responses.retrieve(failed.id)
    assert stored.status == "failed" and stored.output == []
    with pytest.raises(BadRequestError) as error:
        client.responses.create(model=sim.config.model, input="x", previous_response_id=failed.id)
    assert error.value.code == "previous_response_not_continuable"
    # The head is untouched: continuing it sends exactly its history again.
    follow = client.responses.create(
        model=sim.config.model, input="retry", previous_response_id=head.id
    )
    assert follow.status == "completed"
    inputs = [r.json["input"] for r in sim.requests("/v1/responses")]
    assert inputs[-1][:-1] == inputs[1][:-1]


def test_upstream_error_event_mid_stream(client: OpenAI, sim: SimServer) -> None:
    sim.push(StreamError(after_events=3, message="engine died"))
    events = list(client.responses.create(model=sim.config.model, input="x", stream=True))
    assert events[-2].type == "error" and "engine died" in events[-2].message
    assert events[-1].type == "response.failed"


def test_non_streaming_mid_flight_failure_is_a_502_and_stored_as_failed(
    client: OpenAI, sim: SimServer
) -> None:
    sim.push(Disconnect(after_events=3))
    with pytest.raises(APIStatusError) as error:
        client.responses.create(model=sim.config.model, input="x")
    assert error.value.status_code == 502
    response_id = error.value.message.split("'")[1]
    assert client.responses.retrieve(response_id).status == "failed"


def test_upstream_4xx_keeps_its_status_and_stores_nothing(
    server: RunningServer, client: OpenAI, sim: SimServer
) -> None:
    sim.push(Fail(status=400, message="prompt too long for this model"))
    with pytest.raises(BadRequestError) as error:
        client.responses.create(model=sim.config.model, input="x")
    assert "prompt too long" in error.value.message
    sim.push(Fail(status=400, message="nope"))
    with pytest.raises(BadRequestError):
        client.responses.create(model=sim.config.model, input="x", stream=True)


def test_upstream_5xx_is_a_502(client: OpenAI, sim: SimServer) -> None:
    sim.push(Fail(status=500, message="engine crashed"))
    with pytest.raises(APIStatusError) as error:
        client.responses.create(model=sim.config.model, input="x")
    assert error.value.status_code == 502
    assert error.value.code == "upstream_error"


def test_unknown_model_is_the_upstreams_404_model_not_found(client: OpenAI, sim: SimServer) -> None:
    with pytest.raises(APIStatusError) as error:
        client.responses.create(model="no-such-model", input="x")
    assert error.value.status_code == 404
    assert (error.value.code, error.value.param) == ("model_not_found", "model")
    assert "no-such-model" in error.value.message


def test_unreachable_upstream_is_502_and_slow_one_504(
    db_url: str, sim: SimServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    dead = server_settings(db_url, f"http://127.0.0.1:{free_port()}", tmp_path_factory.mktemp("d"))
    slow = server_settings(db_url, sim.url, tmp_path_factory.mktemp("s"), upstream_read_timeout=0.5)
    tenant = create_tenant(db_url)
    for settings, status, code in (
        (dead, 502, "upstream_unreachable"),
        (slow, 504, "upstream_timeout"),
    ):
        running = ThreadedServer(create_app(settings)).start()
        try:
            if status == 504:
                sim.push(Hang())
            response = httpx.post(
                f"{running.url}/v1/responses",
                json={"model": sim.config.model, "input": "x"},
                headers={"authorization": f"Bearer {tenant.api_key}"},
                timeout=20,
            )
            assert response.status_code == status, response.text
            assert response.json()["error"]["code"] == code
            ready = httpx.get(f"{running.url}/ready")
            if status == 502:
                assert ready.status_code == 503
                assert ready.json()["failing"] == ["upstream"]
        finally:
            running.stop()
