"""Codex CLI, unmodified, in a session that outgrows its context: it compacts through
our server (a ``compaction_trigger`` on /v1/responses), then keeps working in the same
session from the compacted window, which reuses the summary request's cached prefix.

Codex 0.169 compacts remotely only for providers it takes for OpenAI's or Azure's (a
custom provider named "OpenAI" or "azure", or the built-in ``openai`` provider with
``openai_base_url``); any other custom provider compacts locally, with a plain turn.
A small ``model_auto_compact_token_limit`` makes it compact after every sampling that
needs a follow-up (its prompt alone is far above the limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentic_api.turns.prepare.summary_request import SUMMARY_REQUEST
from agentic_api.wire.summary import SUMMARY_HEADER
from tests.conftest import RunningServer
from tests.support.codex import Provider, codex_binary, run_codex, websocket_upgrades
from tests.support.prefix_reuse import reusable_tokens
from tests.support.tenants import TenantKeys
from tests.support.typed import served_cached_tokens
from tests.upstream_sim import Call, RecordedRequest, Reply, SimServer, ToolCalls, tokenize

# Runs the real Codex CLI against a server: seconds.
pytestmark = pytest.mark.slow

SMALL_CONTEXT = "model_auto_compact_token_limit = 300\nmodel_context_window = 2000\n"
FIRST_SUMMARY = "NOTES: goal checked once; check it again, then finish."
SECOND_SUMMARY = "NOTES: goal checked twice; finish now."
BLOCK = 16


def _summary_message(summary: str) -> dict[str, Any]:
    text = SUMMARY_HEADER + summary
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _asks_for_summary(call: RecordedRequest) -> bool:
    last: dict[str, Any] = call.json["input"][-1]
    text: object = last["content"][0].get("text")
    return last.get("role") == "user" and text == SUMMARY_REQUEST


def _tokens_through(call: RecordedRequest, text: str) -> int:
    assert call.prompt_text is not None
    end = call.prompt_text.index(text) + len(text)
    return len(tokenize(call.prompt_text[:end]))


@pytest.mark.parametrize(
    "provider",
    [
        Provider(name="OpenAI"),
        Provider(name="OpenAI", websockets=True),
        Provider(builtin=True),
    ],
    ids=["http", "websocket", "builtin-openai-websocket"],
)
def test_codex_compacts_through_the_server_and_keeps_working(
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
    tmp_path: Path,
    provider: Provider,
) -> None:
    binary = codex_binary()
    sim.push(
        ToolCalls([Call("get_goal", {"round": 1}, call_id="call_goal_1")]),
        Reply(FIRST_SUMMARY),
        ToolCalls([Call("get_goal", {"round": 2}, call_id="call_goal_2")]),
        Reply(SECOND_SUMMARY),
        Reply("Goal checked twice, all done."),
    )
    upgrades_before = websocket_upgrades(server)
    result = run_codex(
        binary,
        tmp_path,
        server,
        tenant,
        sim.config.model,
        "check the goal twice, then finish",
        provider=provider,
        extra_config=SMALL_CONTEXT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Goal checked twice, all done." in result.stdout
    assert result.stderr.count("context compacted") == 2
    over_websocket = provider.websockets or provider.builtin
    assert (websocket_upgrades(server) > upgrades_before) == over_websocket
    assert "Falling back from WebSockets" not in result.stderr

    calls = sim.requests("/v1/responses")
    assert [_asks_for_summary(call) for call in calls] == [False, True, False, True, False]
    turn1, compact1, turn2, compact2, final = calls
    # One session throughout: affinity, salt and Codex's cache key never change.
    assert len({call.headers["x-session-id"] for call in calls}) == 1
    assert len({call.json["cache_salt"] for call in calls}) == 1
    assert len({call.json["prompt_cache_key"] for call in calls}) == 1
    for call in calls:
        assert all(
            item.get("type") not in ("compaction", "compaction_trigger")
            for item in call.json["input"]
        )

    # The summary request continues the turn it compacts, with the same tools (Codex's
    # own local compaction drops them, and with them the whole cached prefix).
    assert compact1.json["input"][: len(turn1.json["input"])] == turn1.json["input"]
    assert compact1.json["tools"] == turn1.json["tools"]
    assert compact1.json["tool_choice"] == "none"
    assert served_cached_tokens(compact1) >= reusable_tokens(turn1, compact1, BLOCK) > 0

    # Codex continues from the compacted window: its kept messages, then the summary,
    # and none of the turns it summarized.
    summary = _summary_message(FIRST_SUMMARY)
    assert summary in turn2.json["input"]
    assert all(item.get("call_id") != "call_goal_1" for item in turn2.json["input"])
    # Its first turn reuses the summary request's prefix up to the summary...
    assert served_cached_tokens(turn2) == reusable_tokens(compact1, turn2, BLOCK) > 0
    # ...and the next request the window through the summary itself.
    assert compact2.json["input"][: len(turn2.json["input"])] == turn2.json["input"]
    through_summary = _tokens_through(turn2, FIRST_SUMMARY)
    assert served_cached_tokens(compact2) >= through_summary // BLOCK * BLOCK
    assert served_cached_tokens(compact2) >= reusable_tokens(turn2, compact2, BLOCK)

    # The second compaction replaced the first summary; the session still goes on.
    assert _summary_message(SECOND_SUMMARY) in final.json["input"]
    assert summary not in final.json["input"]
    assert final.cached_tokens == reusable_tokens(compact2, final, BLOCK) > 0
