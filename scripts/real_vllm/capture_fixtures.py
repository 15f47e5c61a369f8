"""Re-capture tests/fixtures/vllm/* from a running tiny vLLM (start.sh).

    python scripts/real_vllm/capture_fixtures.py [URL] [--out tests/fixtures/vllm]

Writes
  requests.json            the request bodies used for the two captures below
  responses_nonstream.json raw body of a non-stream POST /v1/responses (store:false,
                           list input of message items, instructions, cache_salt)
  responses_stream.txt     raw SSE transcript of the same request with stream:true
  errors.json              {case: {request, status_code, body}} for requests vLLM rejects
  accepted.json            {case: {request, status_code, echoed}} for unusual fields/items
                           vLLM accepts (what it echoes back in the Response, if anything)
Ids (resp_*, msg_*) and created_at differ on every capture; temperature 0 keeps the text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]


def msg(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": text}


USER = [msg("user", "What's the weather in Paris?")]
FN_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
}
CALL_OUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
ASSISTANT = {
    "type": "message",
    "role": "assistant",
    "id": "msg_1",
    "status": "completed",
    "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": None}],
}

# name -> extra request fields (merged over a small store:false request)
ERROR_CASES: dict[str, dict[str, Any]] = {
    "item_unknown_type": {"input": [*USER, {"type": "frobnicate", "id": "x"}]},
    "item_compaction": {
        "input": [*USER, {"type": "compaction", "id": "cmp_1", "encrypted_content": "zzz"}]
    },
    "item_reasoning_encrypted_content": {
        "input": [
            *USER,
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "abc"},
            ASSISTANT,
        ]
    },
    "item_input_image_text_only_model": {
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}],
            }
        ]
    },
    "input_empty_list": {"input": []},
    "input_missing": {"input": None},
    "tool_unknown_type": {"tools": [{"type": "frob"}], "tool_choice": "auto"},
    "tool_custom_with_grammar": {
        "tools": [
            {
                "type": "custom",
                "name": "apply_patch",
                "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
            }
        ],
        "tool_choice": "auto",
    },
    "background_without_store": {"background": True},
    "previous_response_id_unknown": {"previous_response_id": "resp_does_not_exist"},
    "cache_salt_with_slash": {"cache_salt": "a/b"},
    "cache_salt_129_chars": {"cache_salt": "a" * 129},
    "model_unknown": {"model": "no-such-model"},
    "max_output_tokens_over_max_model_len": {"max_output_tokens": 100000},
    "max_output_tokens_zero": {"max_output_tokens": 0},
    "prompt_over_max_model_len": {"input": [msg("user", "word " * 3000)]},
}

ACCEPTED_CASES: dict[str, dict[str, Any]] = {
    "prompt_cache_key": {"prompt_cache_key": "sess-1"},
    "metadata": {"metadata": {"a": "b"}},
    "client_metadata": {"client_metadata": {"x": "y"}},
    "unknown_top_level_field": {"xyz_unknown": 123},
    "include": {"include": ["reasoning.encrypted_content"]},
    "reasoning": {"reasoning": {"effort": "low", "summary": "auto"}},
    "text_verbosity": {"text": {"format": {"type": "text"}, "verbosity": "low"}},
    "safety_identifier": {"safety_identifier": "u1"},
    "user": {"user": "u1"},
    "prompt_cache_retention": {"prompt_cache_retention": "24h"},
    "context_management": {
        "context_management": [{"type": "compaction", "compact_threshold": 1000}]
    },
    "conversation": {"conversation": "conv_1"},
    "store_true": {"store": True},
    "stream_options": {"stream_options": {"include_obfuscation": False}},
    "session_id_body": {"session_id": "sess-1"},
    "tool_function": {"tools": [FN_TOOL], "tool_choice": "auto"},
    "tool_namespace": {
        "tools": [{"type": "namespace", "name": "ns", "description": "d", "tools": [FN_TOOL]}],
        "tool_choice": "auto",
    },
    "tool_web_search": {"tools": [{"type": "web_search"}], "tool_choice": "auto"},
    "tool_custom_freeform": {
        "tools": [{"type": "custom", "name": "apply_patch", "description": "d"}],
        "tool_choice": "auto",
    },
    "tool_local_shell": {"tools": [{"type": "local_shell"}], "tool_choice": "auto"},
    "tool_mcp": {
        "tools": [{"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:1"}],
        "tool_choice": "auto",
    },
    "items_function_call_pair": {"input": [*USER, CALL, CALL_OUT]},
    "items_function_call_with_id_status": {
        "input": [
            *USER,
            {**CALL, "id": "fc_1", "status": "completed"},
            {**CALL_OUT, "id": "fco_1", "status": "completed"},
        ]
    },
    "items_custom_tool_call_pair": {
        "input": [
            *USER,
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "x"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
        ]
    },
    "items_reasoning_with_content": {
        "input": [
            *USER,
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "thinking"}],
            },
            ASSISTANT,
        ]
    },
    "items_assistant_with_phase": {"input": [*USER, {**ASSISTANT, "phase": "final_answer"}]},
    "items_message_extra_field": {"input": [{**USER[0], "foo": "bar"}]},
    "items_developer_role": {
        "input": [{"type": "message", "role": "developer", "content": "be nice"}, *USER]
    },
    "items_without_type": {"input": [{"role": "user", "content": "hello"}]},
    "input_string": {"input": "hello"},
    "model_missing": {"model": None},
}


def base(model: str) -> dict[str, Any]:
    return {"model": model, "store": False, "input": USER, "max_output_tokens": 4, "temperature": 0}


def build(model: str, extra: dict[str, Any]) -> dict[str, Any]:
    body = {**base(model), **extra}
    return {k: v for k, v in body.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "url", nargs="?", default=os.environ.get("AGENTIC_VLLM_URL", "http://127.0.0.1:8000")
    )
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "vllm")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    c = httpx.Client(base_url=args.url.rstrip("/"), timeout=120)

    request = {
        "model": args.model,
        "store": False,
        "instructions": "You are a helpful assistant.",
        "input": [
            msg("user", "Say hello."),
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello!"}],
            },
            msg("user", "Now say goodbye."),
        ],
        "cache_salt": "fixture0001",
        "max_output_tokens": 12,
        "temperature": 0,
    }
    stream_request = {**request, "stream": True}
    (out / "requests.json").write_text(
        json.dumps({"responses_nonstream": request, "responses_stream": stream_request}, indent=2)
        + "\n"
    )

    r = c.post("/v1/responses", json=request)
    r.raise_for_status()
    (out / "responses_nonstream.json").write_bytes(r.content)
    with c.stream("POST", "/v1/responses", json=stream_request) as s:
        s.raise_for_status()
        (out / "responses_stream.txt").write_bytes(s.read())

    errors: dict[str, Any] = {}
    for name, extra in ERROR_CASES.items():
        body = build(args.model, extra)
        resp = c.post("/v1/responses", json=body)
        entry = {"request": body, "status_code": resp.status_code, "body": resp.json()}
        if resp.status_code == 200:
            print(f"note: {name} was accepted now", file=sys.stderr)
        errors[name] = entry
    # non-/v1/responses shapes worth having
    resp = c.post(
        "/v1/responses", content=b"{not json", headers={"content-type": "application/json"}
    )
    errors["malformed_json"] = {
        "request": "{not json",
        "status_code": resp.status_code,
        "body": resp.json(),
    }
    resp = c.get("/v1/responses/resp_does_not_exist")
    errors["get_unknown_response"] = {
        "request": "GET /v1/responses/resp_does_not_exist",
        "status_code": resp.status_code,
        "body": resp.json(),
    }
    (out / "errors.json").write_text(json.dumps(errors, indent=2, ensure_ascii=False) + "\n")

    accepted: dict[str, Any] = {}
    for name, extra in ACCEPTED_CASES.items():
        body = build(args.model, extra)
        resp = c.post("/v1/responses", json=body)
        data = resp.json()
        ok_entry: dict[str, Any] = {"request": body, "status_code": resp.status_code}
        if resp.status_code == 200:
            ok_entry["echoed"] = {
                k: data.get(k) for k in extra if k not in ("input", "model") and k in data
            }
            ok_entry["not_echoed"] = [
                k for k in extra if k not in ("input", "model") and k not in data
            ]
            ok_entry["input_tokens"] = data["usage"]["input_tokens"]
        else:
            ok_entry["body"] = data
            print(f"note: {name} was rejected now ({resp.status_code})", file=sys.stderr)
        accepted[name] = ok_entry
    (out / "accepted.json").write_text(json.dumps(accepted, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote fixtures to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
