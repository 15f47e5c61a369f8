"""``context_management`` compaction on SmolLM2 (a real model on CPU vLLM, with the render
endpoint, so the threshold is compared with the engine's exact count): a chain that grows
past a small threshold compacts, answers on the compacted window, and continues from it."""

from __future__ import annotations

import pytest
from openai import OpenAI, omit
from openai.types.responses import ResponseCompactionItem
from openai.types.responses.response_create_params import ContextManagement

from tests.conftest import RunningServer
from tests.real_vllm.conftest import RealVllm
from tests.support.tenants import create_tenant

pytestmark = pytest.mark.real_vllm

THRESHOLD = 1000
COMPACT: list[ContextManagement] = [{"type": "compaction", "compact_threshold": THRESHOLD}]
# About 200 tokens a turn, so the chain passes 1,000 within a few turns.
NOTE = "Delivery log: the ship Aurora left Rotterdam on Monday with 40 tonnes of grain. " * 6


def test_a_smollm2_chain_compacts_past_the_threshold(
    smollm2: RealVllm, smol_server: RunningServer
) -> None:
    client: OpenAI = smol_server.client(create_tenant(smol_server.db_url), timeout=300)
    previous: str | None = None
    compacted_at: list[int] = []
    usage_in: list[int] = []
    for turn in range(8):
        response = client.responses.create(
            model=smollm2.model,
            input=f"Turn {turn}. {NOTE}",
            max_output_tokens=48,
            temperature=0,
            context_management=COMPACT,
            previous_response_id=previous if previous else omit,
        )
        assert response.status in ("completed", "incomplete"), response
        types = [item.type for item in response.output]
        if types[0] == "compaction":
            compacted_at.append(turn)
            item = response.output[0]
            assert isinstance(item, ResponseCompactionItem) and item.encrypted_content
            assert types[1:] and "compaction" not in types[1:]
        assert response.usage is not None
        usage_in.append(response.usage.input_tokens)
        previous = response.id
    assert compacted_at, f"no compaction in 8 turns; input tokens {usage_in}"
    # A plain turn's input (its one model call) stays within reach of the threshold: the
    # turn before passing it was counted under it, exactly, by the engine.
    plain = [n for turn, n in enumerate(usage_in) if turn not in compacted_at]
    assert all(n <= THRESHOLD for n in plain), usage_in
    # The stored chain continues from the compacted window.
    stored = client.responses.retrieve(previous or "")
    assert stored.status in ("completed", "incomplete")
