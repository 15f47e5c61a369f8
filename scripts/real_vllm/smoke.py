"""Smoke-check prefix caching of a running (tiny) vLLM through /v1/responses.

    python scripts/real_vllm/smoke.py [URL] [--model NAME] [--block-size 32] [--json]

URL defaults to $AGENTIC_VLLM_URL or http://127.0.0.1:8000. Exits 0 when every check passes,
1 when one fails, 2 when vLLM can't be reached. Each run uses fresh random cache salts, so
it is repeatable against a warm server. Only stdlib + httpx.

Checks:
  repeat     the same long prompt twice (same cache_salt): 1st cached_tokens == 0,
             2nd == ((P - 1) // B) * B  (every full block; vLLM always recomputes the
             last prompt token, so a prompt of exactly k*B tokens hits (k-1)*B)
  salt       the same prompt with another cache_salt: cached_tokens == 0
  tokenize   POST /tokenize {messages, add_generation_prompt: true} count ==
             usage.input_tokens of the same conversation (instructions = system message)
  continue   turn 2 = turn 1 input + turn 1 output items replayed verbatim (ids, status...)
             + a new user message: 200, and cached_tokens >= full blocks of turn 1's prompt
  tools      turn 2 with replayed function_call / function_call_output items (extra
             fields id/status): 200, and cached_tokens >= full blocks of turn 1's prompt
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import Any

import httpx


def msg(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": text}


LONG_TEXT = " ".join(
    f"Note {i}: the agent read file src/module_{i}.py and found {i * 7} lines to change."
    for i in range(40)
)
INSTRUCTIONS = "You are a careful coding assistant."


class Smoke:
    def __init__(self, url: str, model: str, block: int) -> None:
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=120)
        self.model = model
        self.block = block
        self.results: list[dict[str, Any]] = []

    def check(self, name: str, ok: bool, **details: Any) -> bool:
        self.results.append({"check": name, "ok": bool(ok), **details})
        return ok

    def full_blocks(self, n: int) -> int:
        return (n // self.block) * self.block

    def respond(self, input_items: list[dict[str, Any]], salt: str, **extra: Any) -> dict[str, Any]:
        body = {
            "model": self.model,
            "store": False,
            "instructions": INSTRUCTIONS,
            "input": input_items,
            "cache_salt": salt,
            "max_output_tokens": 24,
            "temperature": 0,
            **extra,
        }
        r = self.client.post("/v1/responses", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"/v1/responses answered {r.status_code}: {r.text[:500]}")
        data: dict[str, Any] = r.json()
        return data

    @staticmethod
    def usage(resp: dict[str, Any]) -> tuple[int, int]:
        u = resp["usage"]
        return int(u["input_tokens"]), int(
            (u.get("input_tokens_details") or {}).get("cached_tokens") or 0
        )

    def run(self) -> bool:
        salt = uuid.uuid4().hex
        first_in = [msg("user", LONG_TEXT)]

        # repeat + salt
        p, c1 = self.usage(self.respond(first_in, salt))
        _, c2 = self.usage(self.respond(first_in, salt))
        want = ((p - 1) // self.block) * self.block
        self.check("repeat.first_cold", c1 == 0, prompt_tokens=p, cached_tokens=c1)
        self.check(
            "repeat.second_full_blocks",
            c2 == want and want > 0,
            prompt_tokens=p,
            cached_tokens=c2,
            expected=want,
        )
        _, c3 = self.usage(self.respond(first_in, uuid.uuid4().hex))
        self.check("salt.other_salt_cold", c3 == 0, cached_tokens=c3)

        # tokenize == input_tokens
        t = self.client.post(
            "/tokenize",
            json={
                "model": self.model,
                "messages": [
                    {"role": "system", "content": INSTRUCTIONS},
                    {"role": "user", "content": LONG_TEXT},
                ],
                "add_generation_prompt": True,
            },
        )
        count = t.json().get("count") if t.status_code == 200 else None
        self.check("tokenize.equals_input_tokens", count == p, tokenize_count=count, input_tokens=p)

        # continuation with the output items replayed verbatim
        salt = uuid.uuid4().hex
        r1 = self.respond(first_in, salt)
        p1, _ = self.usage(r1)
        o1 = int(r1["usage"]["output_tokens"])
        turn2 = first_in + r1["output"] + [msg("user", "Now summarise the notes in one line.")]
        p2, c_cont = self.usage(self.respond(turn2, salt))
        self.check(
            "continue.replayed_output_cached",
            self.full_blocks(p1) <= c_cont < p2,
            turn1_prompt_tokens=p1,
            turn1_output_tokens=o1,
            turn2_prompt_tokens=p2,
            cached_tokens=c_cont,
            min_expected=self.full_blocks(p1),
            full_blocks_of_turn1_prompt_plus_output=self.full_blocks(p1 + o1),
        )

        # continuation through a (synthetic) tool call, items carrying id/status
        salt = uuid.uuid4().hex
        tool_in = [*first_in, msg("user", "Which file has the most lines? Use the tool.")]
        tools = [
            {
                "type": "function",
                "name": "count_lines",
                "description": "Count lines in a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ]
        rt1 = self.respond(tool_in, salt, tools=tools)
        pt1, _ = self.usage(rt1)
        call = {
            "type": "function_call",
            "id": "fc_smoke_1",
            "status": "completed",
            "call_id": "call_smoke_1",
            "name": "count_lines",
            "arguments": json.dumps({"path": "src/module_39.py"}),
        }
        result = {
            "type": "function_call_output",
            "id": "fco_smoke_1",
            "status": "completed",
            "call_id": "call_smoke_1",
            "output": "273",
        }
        pt2, c_tool = self.usage(self.respond([*tool_in, call, result], salt, tools=tools))
        self.check(
            "tools.function_call_replay_cached",
            self.full_blocks(pt1) <= c_tool < pt2,
            turn1_prompt_tokens=pt1,
            turn2_prompt_tokens=pt2,
            cached_tokens=c_tool,
            min_expected=self.full_blocks(pt1),
        )
        return all(r["ok"] for r in self.results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Prefix-cache smoke test for a running vLLM.")
    ap.add_argument(
        "url", nargs="?", default=os.environ.get("AGENTIC_VLLM_URL", "http://127.0.0.1:8000")
    )
    ap.add_argument(
        "--model", default=None, help="served model name (default: first of /v1/models)"
    )
    ap.add_argument(
        "--block-size", type=int, default=int(os.environ.get("AGENTIC_VLLM_BLOCK_SIZE", "32"))
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)

    try:
        client = httpx.Client(base_url=args.url.rstrip("/"), timeout=10)
        client.get("/health").raise_for_status()
        model = args.model or client.get("/v1/models").json()["data"][0]["id"]
    except Exception as exc:
        print(f"smoke: vLLM at {args.url} not reachable: {exc}", file=sys.stderr)
        return 2

    smoke = Smoke(args.url, model, args.block_size)
    try:
        ok = smoke.run()
    except Exception as exc:
        smoke.check("error", False, error=str(exc))
        ok = False
    if args.json:
        print(
            json.dumps(
                {"ok": ok, "url": args.url, "model": model, "results": smoke.results}, indent=2
            )
        )
    else:
        for r in smoke.results:
            details = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("check", "ok"))
            print(f"{'PASS' if r['ok'] else 'FAIL'} {r['check']}: {details}")
        passed = sum(r["ok"] for r in smoke.results)
        print(f"{passed} passed, {len(smoke.results) - passed} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
