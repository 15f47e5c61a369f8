"""Every request field of the SDK's ``ResponseCreateParams`` has one answer (the request-field
table in docs/api.md, ``wire/create_fields.py``): implemented here, forwarded to the upstream,
or refused with a 400 naming it. None is silently dropped.

The walk goes through the official SDK, field by field, against the simulator."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import response_create_params

from agentic_api.wire.create_fields import FIELDS
from tests.api.test_bad_input import count_responses
from tests.conftest import RunningServer
from tests.support.tenants import TenantKeys
from tests.upstream_sim import SimServer

MODEL = "sim-model"

# A valid value (by the SDK's types) for each field, used to walk the table. Fields that
# need an object made first (a parent, a conversation) are filled in by the test.
SAMPLES: dict[str, Any] = {
    "access_programs": {"cyber": "standard"},
    "background": True,
    "background_options": {"completion_window": "soonest", "continuation_id": "agent-1"},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "conversation": None,
    "image": {"context_compression": "disabled"},
    "include": ["message.output_text.logprobs"],
    "input": "hello",
    "instructions": "Answer briefly.",
    "max_output_tokens": 16,
    "max_tool_calls": 3,
    "metadata": {"k": "v"},
    "model": MODEL,
    "moderation": {"model": "omni-moderation-latest"},
    "parallel_tool_calls": False,
    "previous_response_id": None,
    "prompt": {"id": "pmpt_1"},
    "prompt_cache_key": "key-1",
    "prompt_cache_options": {"comparison_response_id": "resp_1"},
    "prompt_cache_retention": "in_memory",
    "reasoning": {"effort": "low"},
    "safety_identifier": "user-hash-1",
    "service_tier": "default",
    "store": False,
    "stream": True,
    "stream_options": {"include_obfuscation": False},
    "temperature": 0.5,
    "text": {"format": {"type": "text"}},
    "tool_choice": "none",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
    ],
    "top_logprobs": 2,
    "top_p": 0.9,
    "truncation": "auto",
    "user": "u1",
}

# Values refused although the field is implemented for others.
REFUSED_VALUES: list[tuple[str, Any, str]] = [
    ("image", {"context_compression": "enabled"}, "image.context_compression"),
    ("prompt_cache_options", {"mode": "explicit"}, "prompt_cache_options.mode"),
    ("prompt_cache_options", {"ttl": "12h"}, "prompt_cache_options.ttl"),
    ("prompt_cache_retention", "24h", "prompt_cache_retention"),
    ("service_tier", "priority", "service_tier"),
    ("service_tier", "flex", "service_tier"),
    ("stream_options", {"include_obfuscation": True}, "stream_options.include_obfuscation"),
]


def sdk_fields() -> set[str]:
    hints = typing.get_type_hints(response_create_params.ResponseCreateParamsStreaming)
    return set(hints)


def test_the_table_covers_exactly_the_sdks_create_fields() -> None:
    assert set(FIELDS) == sdk_fields()
    assert set(SAMPLES) == sdk_fields()


def kwargs_for(field: str, client: OpenAI) -> dict[str, Any]:
    base: dict[str, Any] = {"model": MODEL, "input": "hello"}
    value = SAMPLES[field]
    if field == "previous_response_id":
        value = client.responses.create(**base).id
    elif field == "conversation":
        value = client.conversations.create().id
    elif field == "stream_options":
        base["stream"] = True
    return {**base, field: value}


def create(client: OpenAI, kwargs: dict[str, Any]) -> None:
    answer = client.responses.create(**kwargs)
    if kwargs.get("stream"):
        for _event in answer:
            pass


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_each_field_is_implemented_forwarded_or_refused(
    field: str, server: RunningServer, tenant: TenantKeys, client: OpenAI, sim: SimServer
) -> None:
    policy = FIELDS[field]
    kwargs = kwargs_for(field, client)
    stored_before = count_responses(server.db_url, tenant.id)
    calls_before = sim.calls("/v1/responses")
    if policy.handling == "refused":
        with pytest.raises(openai.BadRequestError) as refused:
            create(client, kwargs)
        error = refused.value.body
        assert isinstance(error, dict)
        assert error["code"] == "unsupported_parameter"
        assert error["param"] == field
        assert field in error["message"]
        # Refused before anything ran or was stored.
        assert sim.calls("/v1/responses") == calls_before
        assert count_responses(server.db_url, tenant.id) == stored_before
        return
    create(client, kwargs)
    if policy.handling == "forwarded":
        sent = sim.requests("/v1/responses")[-1].json
        assert sent[field] == kwargs[field]


@pytest.mark.parametrize(("field", "value", "param"), REFUSED_VALUES)
def test_values_nothing_implements_are_refused_by_name(
    field: str,
    value: Any,
    param: str,
    server: RunningServer,
    tenant: TenantKeys,
    client: OpenAI,
    sim: SimServer,
) -> None:
    kwargs: dict[str, Any] = {"model": MODEL, "input": "hello", field: value}
    if field == "stream_options":
        kwargs["stream"] = True
    with pytest.raises(openai.BadRequestError) as refused:
        create(client, kwargs)
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("unsupported_value", param)
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


def test_background_options_are_echoed_and_not_sent_upstream(
    client: OpenAI, sim: SimServer
) -> None:
    queued = client.responses.create(
        model=MODEL,
        input="hello",
        background=True,
        background_options={"completion_window": "2h", "continuation_id": "agent-9"},
    )
    echoed = (queued.model_extra or {}).get("background_options")
    assert echoed == {"completion_window": "2h", "continuation_id": "agent-9"}
    done = client.responses.retrieve(queued.id)
    while done.status in ("queued", "in_progress"):
        done = client.responses.retrieve(queued.id)
    assert done.status == "completed"
    assert (done.model_extra or {}).get("background_options") == echoed
    assert all("background_options" not in r.json for r in sim.requests("/v1/responses"))


@pytest.mark.parametrize(
    ("options", "extra", "param"),
    [
        ({"completion_window": "2h"}, {}, "background_options.completion_window"),
        ({"completion_window": "8h"}, {"background": True, "stream": True}, None),
        ({"completion_window": "1h"}, {"background": True}, "background_options.completion_window"),
        ({"continuation_id": ""}, {"background": True}, "background_options.continuation_id"),
        ({"continuation_id": "x" * 65}, {"background": True}, None),
        ({"priority": 1}, {"background": True}, "background_options.priority"),
    ],
)
def test_bad_background_options_are_refused(
    options: dict[str, Any],
    extra: dict[str, Any],
    param: str | None,
    server: RunningServer,
    tenant: TenantKeys,
    sim: SimServer,
) -> None:
    response = httpx.post(
        f"{server.url}/v1/responses",
        json={"model": MODEL, "input": "x", "background_options": options, **extra},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"].startswith(param or "background_options")
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


def test_prompt_cache_options_are_echoed_as_applied_and_not_sent_upstream(
    client: OpenAI, sim: SimServer
) -> None:
    sent = client.responses.create(
        model=MODEL, input="hello", prompt_cache_options={"mode": "implicit", "ttl": "30m"}
    )
    assert sent.prompt_cache_options is not None
    assert sent.prompt_cache_options.model_dump() == {
        "mode": "implicit",
        "ttl": "30m",
        "comparison_response_id": None,
    }
    # Only what the client asked for is echoed: no options, none applied.
    plain = client.responses.create(model=MODEL, input="hello")
    assert plain.prompt_cache_options is None
    retrieved = client.responses.retrieve(sent.id)
    assert retrieved.prompt_cache_options == sent.prompt_cache_options
    assert all("prompt_cache_options" not in r.json for r in sim.requests("/v1/responses"))


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"mode": "sometimes"}, "prompt_cache_options.mode"),
        ({"ttl": "1h"}, "prompt_cache_options.ttl"),
        ({"prewarm": "yes"}, "prompt_cache_options.prewarm"),
        ({"comparison_response_id": ""}, "prompt_cache_options.comparison_response_id"),
        ({"comparison_response_id": "r" * 65}, "prompt_cache_options.comparison_response_id"),
        ({"comparison_response_id": "resp\x00"}, "prompt_cache_options.comparison_response_id"),
        ({"breakpoints": 2}, "prompt_cache_options.breakpoints"),
        ("implicit", "prompt_cache_options"),
    ],
)
def test_bad_prompt_cache_options_are_refused(
    options: Any, param: str, server: RunningServer, tenant: TenantKeys, sim: SimServer
) -> None:
    response = httpx.post(
        f"{server.url}/v1/responses",
        json={"model": MODEL, "input": "x", "prompt_cache_options": options},
        headers={"authorization": f"Bearer {tenant.api_key}"},
        timeout=20,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert sim.calls("/v1/responses") == 0
    assert count_responses(server.db_url, tenant.id) == 0


def test_the_api_reference_table_says_what_the_code_does() -> None:
    reference = (Path(__file__).parents[2] / "docs" / "api.md").read_text()
    for name, policy in FIELDS.items():
        assert f"| `{name}` | {policy.handling} | {policy.note} |" in reference, name
