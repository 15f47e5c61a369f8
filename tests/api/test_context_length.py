"""A prompt past the model's window: vLLM refuses it in words; the client gets OpenAI's
``context_length_exceeded`` (400, param ``input``), streamed or not, and nothing is stored."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.conftest import running_server
from tests.support.sql import scalar
from tests.support.tenants import create_tenant
from tests.upstream_sim import SimServer

MODEL = "sim-model"
LONG = " ".join(f"word{n}" for n in range(200))


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_past_the_window_is_context_length_exceeded(
    fresh_db: str, tmp_path: Path, stream: bool
) -> None:
    with (
        SimServer(max_model_len=64) as small,
        running_server(fresh_db, small, tmp_path) as server,
    ):
        tenant = create_tenant(fresh_db)
        client = OpenAI(base_url=f"{server.url}/v1", api_key=tenant.api_key, max_retries=0)
        conversation = client.conversations.create()
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model=MODEL, input=LONG, conversation=conversation.id, stream=stream
            )
        assert refused.value.code == "context_length_exceeded"
        assert refused.value.param == "input"
        assert "max_model_len" in refused.value.message
        stored = "SELECT count(*) FROM responses WHERE tenant_id = :t"
        assert scalar(fresh_db, stored, t=tenant.id) == 0
        assert list(client.conversations.items.list(conversation.id)) == []
        # A prompt that fits still runs.
        short = client.responses.create(model=MODEL, input="hi", conversation=conversation.id)
        assert short.status == "completed"
