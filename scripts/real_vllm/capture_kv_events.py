"""Record a real vLLM's KV-event stream (ZMQ frames as they arrive) for the residency tests.

    python scripts/real_vllm/capture_kv_events.py URL ENDPOINT [--out FILE]

URL is a tiny vLLM started by start.sh with KV events on ENDPOINT (an ``ipc://`` path, which
vLLM binds and we connect to), a small KV cache so that pressure evicts, and
``VLLM_SERVER_DEV_MODE=1`` so ``/reset_prefix_cache`` exists, e.g.

    AGENTIC_VLLM_KVCACHE_GB=none VLLM_SERVER_DEV_MODE=1 scripts/real_vllm/start.sh 18611 \\
        tiny-llama --max-model-len 1024 --kv-cache-memory-bytes 2097152 \\
        --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq",
                             "endpoint":"ipc:///tmp/kv-a.ipc","topic":"replica-a"}'

The file (JSON lines) holds ``{"mark": NAME, "requests": [...]}`` before each step and
``{"topic", "seq", "payload"}`` (payload base64, exactly the bytes vLLM sent) for every frame
received during it. Steps, after a reset (so earlier traffic cannot turn them into hits):
two turns of one session (the second continues the first), the same prompt under another
tenant's salt, the first session's prefix reused by another session with
``kv_cache_report_mode: full``, distinct long prompts until earlier blocks are evicted,
and a prefix-cache reset (AllBlocksCleared; flushed by one more request, since vLLM
publishes at its next engine step).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import zmq

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "kv_events" / "vllm_cpu_0.32.jsonl"


def words(seed: str, count: int) -> str:
    return " ".join(f"{seed}{i % 97}" for i in range(count))


def request(
    model: str, session: str, salt: str, text: str, *, full: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "store": False,
        "input": [{"type": "message", "role": "user", "content": text}],
        "max_output_tokens": 2,
        "temperature": 0,
        "cache_salt": salt,
        "session_id": session,
    }
    if full:
        body["vllm_xargs"] = {"kv_cache_report_mode": "full"}
    return body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("endpoint")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    model: str = args.model

    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(args.endpoint)
    time.sleep(0.5)  # let the subscription reach the publisher (ZMQ's slow joiner)
    client = httpx.Client(base_url=args.url.rstrip("/"), timeout=120)
    lines: list[dict[str, Any]] = []

    def drain() -> None:
        # vLLM publishes a step's events right after the step; give it a moment.
        while socket.poll(700):
            topic, seq, payload = socket.recv_multipart()
            lines.append(
                {
                    "topic": topic.decode(),
                    "seq": int.from_bytes(seq, "big"),
                    "payload": base64.b64encode(payload).decode(),
                }
            )

    def step(name: str, bodies: list[dict[str, Any]], *, reset: bool = False) -> None:
        lines.append({"mark": name, "requests": bodies, "reset": reset})
        if reset:
            answer = client.post("/reset_prefix_cache")
            answer.raise_for_status()
        for body in bodies:
            answer = client.post("/v1/responses", json=body)
            answer.raise_for_status()
            usage = answer.json()["usage"]
            print(
                f"{name}: {body['session_id']} prompt={usage['input_tokens']} "
                f"cached={usage['input_tokens_details']['cached_tokens']}",
                file=sys.stderr,
            )
        drain()

    first = words("alpha", 150)
    # Start from an empty cache, so earlier traffic cannot turn our stores into hits.
    step("turn1", [request(model, "sess-a", "salt-one", first)], reset=True)
    step("turn2", [request(model, "sess-a", "salt-one", first + " " + words("beta", 80))])
    step("other_salt", [request(model, "sess-b", "salt-two", first)])
    step("full_report", [request(model, "sess-c", "salt-one", first, full=True)])
    step(
        "pressure",
        [request(model, f"sess-p{i}", "salt-one", words(f"p{i}x", 150)) for i in range(8)],
    )
    step("reset", [request(model, "sess-d", "salt-one", words("delta", 60))], reset=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    frames = sum(1 for line in lines if "seq" in line)
    print(f"wrote {frames} frames to {args.out}", file=sys.stderr)
    socket.close(linger=0)
    context.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
