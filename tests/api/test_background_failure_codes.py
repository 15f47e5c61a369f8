"""A background job refused by the upstream fails with the code the same refusal has in
the foreground (``context_length_exceeded``, ``upstream_authentication_failed``), on the
retrieved Response and in its stream, never a generic ``server_error``; and vLLM V1's
"decoder prompt … is longer than the maximum model length" is ``context_length_exceeded``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.conftest import RunningServer, running_server
from tests.support.clients import openai_client
from tests.support.tenants import TenantKeys, create_tenant
from tests.upstream_sim import Fail, SimServer

LONG = " ".join(f"word{n}" for n in range(200))
# vLLM V1's input check (vllm/v1/engine/processor.py), as its 400 body says it.
DECODER_PROMPT_TOO_LONG = (
    "The decoder prompt (length 407) is longer than the maximum model length of 64. Make "
    "sure that `max_model_len` is no smaller than the number of text tokens."
)
UPSTREAM_KEY = "upstream-key-the-model-server-expects"


def _settle(client: OpenAI, response_id: str) -> Any:
    deadline = time.monotonic() + 30
    while True:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        assert time.monotonic() < deadline, response
        time.sleep(0.05)


def _client(server: RunningServer, tenant: TenantKeys) -> OpenAI:
    # Closed after the test (an unclosed client's sockets warn when collected, in
    # whichever later test that happens).
    return openai_client(f"{server.url}/v1", tenant.api_key, timeout=20)


def _foreground_code(client: OpenAI, model: str) -> tuple[str | None, str | None]:
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model=model, input=LONG)
    return refused.value.code, refused.value.param


def _background_error(client: OpenAI, model: str) -> tuple[Any, list[Any]]:
    """The failed job's stored error, and the error events of its stream (replayed)."""
    queued = client.responses.create(model=model, input=LONG, background=True)
    failed = _settle(client, queued.id)
    assert failed.status == "failed", failed
    replayed = list(client.responses.retrieve(queued.id, stream=True))
    errors = [event for event in replayed if event.type == "error"]
    assert replayed[-1].type == "response.failed"
    assert replayed[-1].response.error == failed.error
    return failed.error, errors


def _assert_same_refusal(client: OpenAI, model: str, code: str, param: str | None) -> None:
    assert _foreground_code(client, model) == (code, param)
    error, events = _background_error(client, model)
    assert error.code == code, error
    assert error.param == param
    assert [(event.code, event.param) for event in events] == [(code, param)]


@pytest.fixture
def small_sim() -> Iterator[SimServer]:
    with SimServer(max_model_len=64) as server:
        yield server


def test_a_prompt_past_the_window_fails_a_job_with_context_length_exceeded(
    fresh_db: str, small_sim: SimServer, tmp_path: Path
) -> None:
    with running_server(fresh_db, small_sim, tmp_path) as server:
        client = _client(server, create_tenant(fresh_db))
        _assert_same_refusal(client, small_sim.config.model, "context_length_exceeded", "input")
        error, _ = _background_error(client, small_sim.config.model)
        assert error.type == "invalid_request_error"
        assert "max_model_len" in error.message


def test_vllm_v1_decoder_prompt_wording_is_context_length_exceeded(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    with running_server(fresh_db, sim, tmp_path) as server:
        client = _client(server, create_tenant(fresh_db))
        # One refusal each for the foreground create and the background job.
        sim.push(
            Fail(400, message=DECODER_PROMPT_TOO_LONG), Fail(400, message=DECODER_PROMPT_TOO_LONG)
        )
        _assert_same_refusal(client, sim.config.model, "context_length_exceeded", "input")
        # Scripted refusals used up: the same prompt now runs.
        assert client.responses.create(model=sim.config.model, input=LONG).status == "completed"


def test_a_refused_upstream_key_fails_a_job_with_upstream_authentication_failed(
    fresh_db: str, tmp_path: Path
) -> None:
    with (
        SimServer(api_key=UPSTREAM_KEY) as guarded,
        running_server(fresh_db, guarded, tmp_path, upstream_api_key="wrong") as server,
    ):
        client = _client(server, create_tenant(fresh_db))
        _assert_same_refusal(client, guarded.config.model, "upstream_authentication_failed", None)
        error, _ = _background_error(client, guarded.config.model)
        assert error.type == "server_error"
        assert "upstream credentials" in error.message
