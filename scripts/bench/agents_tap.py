"""A recording proxy in front of one vLLM replica, for ``scripts/bench/agents_routing.sh``.

The router sees the tap as the worker: every request goes through unchanged (streams
included), the response gains an ``x-upstream-replica: NAME`` header, and each
``POST /v1/responses`` is logged as one JSON line: which bench agent and turn it was (the
``[bench TAG aN tM]`` tag on the request's newest item), the program the router was told
(``vllm_xargs.agentic_context``), the status and the usage. Through our server the client
never sees the replica (we do not relay upstream headers); ``agents_attribute.py`` joins
these lines to the bench's rows instead.

    python scripts/bench/agents_tap.py --listen 19731 --upstream http://127.0.0.1:19741 \\
        --name r1 --log /tmp/r1.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from typing import Any

import aiohttp
from aiohttp import web

TAG = re.compile(r"\[bench (\S+) a(\d+) t(\d+)\]")
ENDS = ("completed", "incomplete", "failed")
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


def describe(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    items = data.get("input")
    newest = json.dumps(items[-1]) if isinstance(items, list) and items else str(items)
    # The bench tags what its client sends; a request whose newest item is the model's own
    # (a keep-warm re-warm: the paused turn's continuation with no new input) is no turn
    # of it, whatever that output happens to quote.
    ours = not (isinstance(items, list) and items and _is_model_output(items[-1]))
    match = TAG.search(newest) if ours else None
    context = (data.get("vllm_xargs") or {}).get("agentic_context")
    program = None
    if isinstance(context, str):
        try:
            program = json.loads(context).get("program_id")
        except ValueError:
            program = "unparseable"
    return {
        "run": match.group(1) if match else None,
        "agent": int(match.group(2)) if match else None,
        "turn": int(match.group(3)) if match else None,
        "program": program,
        # Our server's session coordinate (every agent of a multi-agent tree: the root's).
        "session": data.get("session_id"),
        "stream": bool(data.get("stream")),
    }


def _is_model_output(item: Any) -> bool:
    return isinstance(item, dict) and (
        item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")
    )


def usage_of(data: dict[str, Any]) -> dict[str, Any]:
    usage = data.get("usage") or {}
    return {
        "input_tokens": usage.get("input_tokens"),
        "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens"),
    }


class Tap:
    def __init__(self, upstream: str, name: str, log_path: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.name = name
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the app
        self.session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5)
            )
        body = await request.read()
        logged = request.method == "POST" and request.path == "/v1/responses"
        record: dict[str, Any] = {"replica": self.name, "start": time.time()}
        if logged:
            record.update(describe(body))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        try:
            upstream = await self.session.request(
                request.method,
                self.upstream + request.path_qs,
                data=body,
                headers=headers,
                allow_redirects=False,
            )
        except aiohttp.ClientError as exc:
            if logged:
                self.write({**record, "status": 502, "error": str(exc)[:200]})
            return web.json_response(
                {"error": {"message": f"replica {self.name} unreachable", "type": "tap"}},
                status=502,
            )
        tail = b""
        try:
            async with upstream:
                reply = web.StreamResponse(status=upstream.status)
                for key, value in upstream.headers.items():
                    if key.lower() not in HOP:
                        reply.headers[key] = value
                reply.headers["x-upstream-replica"] = self.name
                await reply.prepare(request)
                async for chunk in upstream.content.iter_any():
                    if logged:
                        tail = (tail + chunk)[-65536:]
                    await reply.write(chunk)
                await reply.write_eof()
        finally:
            # Logged even when the router hangs up first: it may close a stream as soon
            # as it has read the terminal event, before the chunked encoding's end.
            if logged:
                self.write({**record, "status": upstream.status, **self.final(tail, record)})
        return reply

    @staticmethod
    def final(tail: bytes, record: dict[str, Any]) -> dict[str, Any]:
        text = tail.decode(errors="replace")
        if not record.get("stream"):
            try:
                return usage_of(json.loads(text))
            except ValueError:
                return {}
        for line in reversed(text.splitlines()):
            if line.startswith("data:") and any(f'"response.{end}"' in line for end in ENDS):
                try:
                    return usage_of(json.loads(line[5:]).get("response") or {})
                except ValueError:
                    return {}
        return {}

    def write(self, record: dict[str, Any]) -> None:
        record["end"] = time.time()
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    tap = Tap(args.upstream, args.name, args.log)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", tap.handle)
    web.run_app(app, host="127.0.0.1", port=args.listen, print=None, access_log=None)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    main()
