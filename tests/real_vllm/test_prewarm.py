"""``prompt_cache_options.prewarm`` on real vLLM (the tiny model on CPU): a prewarm of a
continuation prefills exactly the prompt the real turn then sends, so that turn is served
every full block from the cache, and nothing of the prewarm is stored. The oracle is
vLLM's own ``cached_tokens``; the control is the same continuation shape without one.
Run with ``pytest -m real_vllm tests/real_vllm/test_prewarm.py``."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest

from tests.conftest import RunningServer
from tests.real_vllm.conftest import RealVllm
from tests.real_vllm.test_real_vllm import INSTRUCTIONS, blocks, cached, client_for, user_text
from tests.support.sql import scalar
from tests.support.tenants import create_tenant
from tests.support.typed import usage_of

pytestmark = pytest.mark.real_vllm


def test_a_prewarmed_continuation_is_served_from_the_cache_and_nothing_is_stored(
    real_server: RunningServer, real_vllm: RealVllm, report: list[dict[str, Any]]
) -> None:
    tenant = create_tenant(real_server.db_url)
    client = client_for(real_server, tenant)
    nonce = uuid.uuid4().hex[:12]

    def create(text: str, **extra: Any) -> Any:
        return client.responses.create(
            model=real_vllm.model,
            input=text,
            instructions=INSTRUCTIONS,
            temperature=0,
            max_output_tokens=4,
            **extra,
        )

    first = create(user_text(1, nonce, notes=12))
    follow_up = user_text(2, nonce, notes=30)
    # A long new input: what a turn gains from a prewarm is its own new tokens prefilled.
    warmed = create(
        follow_up, previous_response_id=first.id, prompt_cache_options={"prewarm": True}
    )
    assert warmed.status == "completed" and warmed.output == []
    assert usage_of(warmed).output_tokens == 0
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(warmed.id)
    turns = "SELECT count(*) FROM responses WHERE tenant_id = :t"
    assert scalar(real_server.db_url, turns, t=tenant.id) == 1
    real = create(follow_up, previous_response_id=first.id)
    size = usage_of(real).input_tokens
    assert size == usage_of(warmed).input_tokens
    assert cached(real) == blocks(size - 1, real_vllm.block_size) > 0
    # The control: the same shape of continuation, not prewarmed, reuses only its
    # parent's blocks, far fewer than every block of its prompt.
    other = create(user_text(1, nonce + "x", notes=12))
    control = create(user_text(2, nonce + "x", notes=30), previous_response_id=other.id)
    assert cached(control) < cached(real)
    report.append(
        {
            "case": f"prewarm/{real_server.backend}",
            "input_tokens": size,
            "prewarmed_cached": cached(real),
            "control_cached": cached(control),
        }
    )
