"""The floor of a Python relay: the least any server on our stack can spend per streamed
event, as a `bench streaming` target beside ours and the peer.

    .venv/bin/python scripts/bench/relay_floor.py --port PORT --upstream URL

One ASGI app under uvicorn (httptools, uvloop: our server's stack) that forwards each
``POST /v1/responses`` body to ``URL/v1/responses`` with aiohttp (our upstream client) and
writes every chunk the upstream sends straight to the client, unparsed: no
authentication, no history, no database, no JSON decoded, checked, renumbered or
serialized, no event stored. It answers ``GET /health`` for the bench scripts. It is not a
server anyone should run: it shows how much of our CPU per event is the stack itself
(the event loop, the HTTP server, the HTTP client, one socket write per upstream chunk)
and how much is our own work per event. Used by docs/benchmarks/streaming/README.md
(``FLOOR=1 scripts/bench/streaming.sh ...``).
"""

from __future__ import annotations

import argparse
from typing import Any

import aiohttp
import uvicorn

Scope = dict[str, Any]


class FloorRelay:
    def __init__(self, upstream: str) -> None:
        self.url = upstream.rstrip("/") + "/v1/responses"
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["method"] == "GET":
            await _answer(send, 200, b'{"status":"ok"}', b"application/json")
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        assert self.session is not None
        async with self.session.post(
            self.url, data=body, headers={"content-type": "application/json"}
        ) as upstream:
            await send(
                {
                    "type": "http.response.start",
                    "status": upstream.status,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            async for chunk in upstream.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0),
                    cookie_jar=aiohttp.DummyCookieJar(),
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _answer(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type)],
        }
    )
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    uvicorn.run(
        FloorRelay(args.upstream),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
