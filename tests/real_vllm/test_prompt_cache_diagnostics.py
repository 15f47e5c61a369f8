"""``prompt_cache_diagnostics`` on a real model (SmolLM2-135M-Instruct on CPU vLLM, the
token-truth tier's model: its answers re-tokenize exactly, so a continuation can be a
true hit). The oracle is vLLM's own ``cached_tokens``: a hit only where vLLM served the
compared response's prefix, a miss naming the changed instructions otherwise.
Run with ``pytest -m real_vllm tests/real_vllm/test_prompt_cache_diagnostics.py``."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI
from openai.types.responses.response import (
    PromptCacheDiagnosticsCacheHit,
    PromptCacheDiagnosticsCacheMiss,
)

from tests.conftest import RunningServer
from tests.real_vllm.conftest import RealVllm
from tests.real_vllm.test_token_truth import ask
from tests.support.admin_api import AdminApi
from tests.support.tenants import create_tenant

pytestmark = pytest.mark.real_vllm


def test_a_named_comparison_is_a_hit_and_changed_instructions_a_miss(
    smollm2: RealVllm, smol_server: RunningServer
) -> None:
    client: OpenAI = smol_server.client(create_tenant(smol_server.db_url), timeout=300)
    admin = AdminApi(smol_server.url, smol_server.db_url)
    try:
        # Two turns of the token-truth chain first: the compared prefix then spans full
        # blocks of any size the tier runs with (32, or vLLM 0.34's 64).
        opening = ask(client, smollm2, "List three fruits, one per line.")
        first = ask(
            client,
            smollm2,
            "Now list three vegetables, one per line.",
            previous_response_id=opening.id,
        )
        compared: Any = {"comparison_response_id": first.id}
        second = ask(
            client,
            smollm2,
            "And three colors, one per line.",
            previous_response_id=first.id,
            prompt_cache_options=compared,
        )
        account = admin.account(second.id)
        assert account["status"] == "exact", account["explanation"]
        cached = second.usage.input_tokens_details.cached_tokens
        assert cached == account["measured_cached"] > 0
        assert isinstance(second.prompt_cache_diagnostics, PromptCacheDiagnosticsCacheHit)
        changed = ask(
            client,
            smollm2,
            "And three colors, one per line.",
            previous_response_id=first.id,
            instructions="Answer in French.",
            prompt_cache_options=compared,
        )
        diagnosed = changed.prompt_cache_diagnostics
        assert isinstance(diagnosed, PromptCacheDiagnosticsCacheMiss), diagnosed
        assert diagnosed.reason == "input_changed"
        account = admin.account(changed.id)
        assert account["cause"] == "fingerprint" and "instructions" in account["changes"]
        assert diagnosed.comparison_reusable_tokens == account["reusable_tokens"]
        assert diagnosed.cache_missed_tokens == (
            changed.usage.input_tokens - changed.usage.input_tokens_details.cached_tokens
        )
    finally:
        admin.close()


def test_a_repeated_prompt_is_a_hit_against_a_response_it_does_not_continue(
    smollm2: RealVllm, smol_server: RunningServer
) -> None:
    """Issue 38, item 15: the same question asked again, compared with the first asking
    (not its parent: it continues nothing). vLLM serves every full block of the repeated
    prompt, and that is a hit; another question is a miss."""
    client: OpenAI = smol_server.client(create_tenant(smol_server.db_url), timeout=300)
    # Longer than one KV block of any size the tier runs with (32, or vLLM 0.34's 64).
    question = (
        "Explain in a few sentences why the sky looks blue during the day and red or "
        "orange at sunset, and what the scattering of light has to do with it. Also say "
        "how the colour of the sky changes with altitude, on a mountain or seen from an "
        "aeroplane, and why the sky on Mars looks different from ours."
    )
    first = ask(client, smollm2, question, max_output_tokens=8)
    compared: Any = {"comparison_response_id": first.id}
    again = ask(client, smollm2, question, max_output_tokens=8, prompt_cache_options=compared)
    assert again.usage.input_tokens == first.usage.input_tokens
    block = smollm2.block_size
    # The oracle: vLLM served every full block it could of the repeated prompt.
    served = again.usage.input_tokens_details.cached_tokens
    assert served == (again.usage.input_tokens - 1) // block * block > 0
    assert isinstance(again.prompt_cache_diagnostics, PromptCacheDiagnosticsCacheHit), (
        again.prompt_cache_diagnostics
    )
    other = ask(
        client,
        smollm2,
        "Name three rivers in Africa and the countries they flow through.",
        max_output_tokens=8,
        prompt_cache_options=compared,
    )
    diagnosed = other.prompt_cache_diagnostics
    assert isinstance(diagnosed, PromptCacheDiagnosticsCacheMiss), diagnosed
    assert diagnosed.reason == "input_changed"
