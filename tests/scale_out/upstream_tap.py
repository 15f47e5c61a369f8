"""A counting proxy between the gateways and the router: one port per gateway.

Every gateway sends its model requests to a port of its own here, so a log line says which
gateway replica ran a model call. Each request is logged when it arrives (a gateway killed
mid-stream still leaves its line) with the load driver's request tag — the last
``[k:...]`` in the body, the newest input's, because earlier turns' tags are history — and
forwarded unchanged, its answer streamed back as it comes.

    python -m tests.scale_out.upstream_tap --upstream http://127.0.0.1:PORT \
        --listen g1=PORT1 --listen g2=PORT2 --log taps.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from typing import IO

from aiohttp import ClientSession, ClientTimeout, web

REQUEST_TAG = re.compile(rb"\[k:([0-9a-f]{16})\]")
# Headers aiohttp sets for the hop itself.
_HOP = {"host", "content-length", "transfer-encoding", "connection"}


def last_tag(body: bytes) -> str | None:
    found = REQUEST_TAG.findall(body)
    return found[-1].decode() if found else None


def tap_app(name: str, upstream: str, client: ClientSession, log: IO[str]) -> web.Application:
    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST":
            line = {"gateway": name, "path": request.path, "tag": last_tag(body), "at": time.time()}
            log.write(json.dumps(line) + "\n")
            log.flush()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with client.request(
            request.method, upstream + request.path_qs, data=body, headers=headers
        ) as answer:
            reply = web.StreamResponse(status=answer.status)
            for key, value in answer.headers.items():
                if key.lower() not in _HOP and key.lower() != "content-encoding":
                    reply.headers[key] = value
            await reply.prepare(request)
            async for chunk in answer.content.iter_any():
                await reply.write(chunk)
            await reply.write_eof()
            return reply

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def serve(upstream: str, listen: dict[str, int], log: IO[str]) -> None:
    async with ClientSession(timeout=ClientTimeout(total=None), auto_decompress=False) as client:
        for name, port in listen.items():
            runner = web.AppRunner(tap_app(name, upstream.rstrip("/"), client, log))
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
        print("taps listening", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--listen", action="append", required=True, help="NAME=PORT")
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    listen = {name: int(port) for name, _, port in (s.partition("=") for s in args.listen)}
    with open(args.log, "a", encoding="utf-8") as log:
        asyncio.run(serve(args.upstream, listen, log))


if __name__ == "__main__":
    main()
