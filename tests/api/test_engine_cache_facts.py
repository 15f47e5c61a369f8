"""What the engine says about its own cache, taken from it: the KV block size, never
assumed (read from its /metrics; vLLM 0.34's default is 64, 0.32's 16; while nothing states
it, continuations' token accounts are unknown and their diagnostics unavailable rather than
figured on a guess); and its own count of prefix-cache writes, used when it gives one and
compared with ours (a mismatch counted in /metrics and noted in the token account)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types.responses.response import PromptCacheDiagnosticsUnavailable
from prometheus_client import REGISTRY

from tests.api.test_token_accounts import account_of
from tests.conftest import running_server
from tests.support.tenants import create_admin_key, create_tenant
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"
LONG = "A question with enough words in it to fill more than one cache block of tokens. " * 6


def checks(result: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "agentic_cache_write_checks_total", {"model": MODEL, "result": result}
        )
        or 0.0
    )


def chain(client: OpenAI, sim: SimServer) -> list[str]:
    sim.push(Reply("A first answer that is long enough to matter."), Reply("A second answer."))
    first = client.responses.create(model=MODEL, input=LONG)
    second = client.responses.create(
        model=MODEL,
        input="And then?",
        previous_response_id=first.id,
        prompt_cache_options={"comparison_response_id": first.id},
    )
    assert second.usage is not None
    return [first.id, second.id]


@pytest.fixture
def accounts(fresh_db: str, tmp_path: Path) -> Iterator[Any]:
    """Runs a two-turn chain against a simulator configured by the test and returns the
    accounts and the second response's diagnostics."""

    def run(**config: Any) -> tuple[list[dict[str, Any]], Any, list[Any]]:
        with (
            SimServer(**config) as sim,
            running_server(fresh_db, sim, tmp_path / str(len(config))) as server,
        ):
            client = server.client(create_tenant(fresh_db), timeout=20)
            first, second = chain(client, sim)
            diagnosed = client.responses.retrieve(second).prompt_cache_diagnostics
            usages = [client.responses.retrieve(made).usage for made in (first, second)]
            with httpx.Client(
                base_url=f"{server.url}/admin/v1",
                headers={"Authorization": f"Bearer {create_admin_key(fresh_db)}"},
                timeout=20,
            ) as admin:
                return (
                    [
                        account_of(admin, first)["account"],
                        account_of(admin, second)["account"],
                    ],
                    diagnosed,
                    usages,
                )

    yield run


def test_a_64_token_block_is_read_from_the_engine(accounts: Any) -> None:
    (cold, continued), _, _ = accounts(block_size=64)
    assert cold["block_size"] == continued["block_size"] == 64
    assert continued["status"] == "exact"
    assert continued["expected_cached"] == (continued["parent_tokens"] - 1) // 64 * 64 > 0
    assert continued["measured_cached"] == continued["expected_cached"]


def test_an_engine_that_states_no_block_size_gets_no_assumed_one(accounts: Any) -> None:
    (cold, continued), diagnosed, _ = accounts(block_size=64, reports_block_size=False)
    assert cold["status"] == "cold_start" and cold["block_size"] is None
    assert continued["status"] == "unknown" and continued["block_size"] is None
    assert "block size is unknown" in continued["reason"]
    assert continued["expected_cached"] is None
    assert isinstance(diagnosed, PromptCacheDiagnosticsUnavailable)
    # No comparison of cache writes either: ours needs the block size.
    assert cold["cache_write"] is None and continued["cache_write"] is None


def test_the_engines_cache_writes_are_used_and_agree_with_ours(accounts: Any) -> None:
    agreed = checks("agree")
    made, _, usages = accounts(block_size=64)
    for account, usage in zip(made, usages, strict=True):
        written = usage.input_tokens_details.cache_write_tokens
        assert account["cache_write"] == {"engine": written, "expected": written, "agrees": True}
    assert checks("agree") == agreed + 2


def test_a_mismatch_of_cache_writes_is_counted_and_noted(accounts: Any) -> None:
    mismatched = checks("mismatch")
    (cold, continued), _, usages = accounts(block_size=64, cache_write_report="uncached")
    for account, usage in zip((cold, continued), usages, strict=True):
        details = usage.input_tokens_details
        # The client gets the engine's own count, not ours.
        assert details.cache_write_tokens == usage.input_tokens - details.cached_tokens
        expected = usage.input_tokens // 64 * 64 - details.cached_tokens
        assert account["cache_write"] == {
            "engine": details.cache_write_tokens,
            "expected": expected,
            "agrees": False,
        }
    assert checks("mismatch") == mismatched + 2
    assert "the engine reports writing" in continued["explanation"]


def test_without_the_engines_count_nothing_is_compared(accounts: Any) -> None:
    compared = checks("agree") + checks("mismatch")
    (cold, continued), _, usages = accounts(block_size=64, cache_write_report="absent")
    assert cold["cache_write"] is None and continued["cache_write"] is None
    for usage in usages:
        details = usage.input_tokens_details
        # Ours, then: everything that had to be prefilled.
        assert details.cache_write_tokens == usage.input_tokens - details.cached_tokens
    assert checks("agree") + checks("mismatch") == compared
