"""The simulator's ASGI app and ``SimServer``, which runs it on a loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import httpx
import orjson
import uvicorn
from fastapi import FastAPI, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import chat_api, messages_api, responses_api, tokenizer
from .behaviors import Behavior, behavior_from_json
from .common import check_model, parse_json_object
from .errors import SimHTTPError, schema_error
from .exchange import Client, Runtime
from .render import render_chat
from .state import RecordedRequest, SimConfig, SimState

CONTROL_PREFIX = "/_sim/"


# A route's handler, as the app is given it.
Route = Callable[[Request], Awaitable[Response]]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _error(exc: SimHTTPError) -> Response:
    return _json(exc.body(), exc.status)


class RecordingMiddleware:
    """Records every request (except the control API) before the app sees it.

    Pure ASGI so that nothing is buffered on the way out and the app still receives
    ``http.disconnect`` after the body has been read here.
    """

    def __init__(self, app: ASGIApp, state: SimState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replica = self.state.config.replica
        send_out = send
        if replica is not None:

            async def send_with_replica(message: Message) -> None:
                if message["type"] == "http.response.start":
                    headers = [
                        *message.get("headers", []),
                        (b"x-upstream-replica", replica.encode()),
                    ]
                    message = {**message, "headers": headers}
                await send(message)

            send_out = send_with_replica

        if scope["path"].startswith(CONTROL_PREFIX):
            await self.app(scope, receive, send_out)
            return

        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            parsed: Any = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        scope["sim.record"] = self.state.record(
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            body=body,
            parsed=parsed,
            client=scope.get("client"),
        )
        if not self._authorized(scope):
            await _json({"error": "Unauthorized"}, 401)(scope, _body_already_read, send_out)
            return
        replayed = False

        async def replay(self_receive: Receive = receive) -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await self_receive()

        await self.app(scope, replay, send_out)

    def _authorized(self, scope: Scope) -> bool:
        expected = self.state.config.api_key
        if expected is None or not scope["path"].startswith("/v1"):
            return True
        headers = dict(scope["headers"])
        return headers.get(b"authorization") == f"Bearer {expected}".encode()


async def _body_already_read() -> Message:
    return {"type": "http.disconnect"}


def _record_of(request: Request) -> RecordedRequest:
    rec = request.scope["sim.record"]
    assert isinstance(rec, RecordedRequest)
    return rec


def _detokenized(body: dict[str, Any], config: SimConfig) -> dict[str, Any]:
    check_model(body, config)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise schema_error("tokens: Input should be a valid list of integers")
    return {"prompt": "".join(tokenizer.piece_of(t) for t in tokens)}


def _tokenized(body: dict[str, Any], config: SimConfig) -> dict[str, Any]:
    check_model(body, config)
    if isinstance(body.get("messages"), list):
        tools = body.get("tools")
        text = render_chat(
            body["messages"],
            tools if isinstance(tools, list) else None,
            add_generation_prompt=body.get("add_generation_prompt", True) is not False,
        ).text
    elif isinstance(body.get("prompt"), str):
        text = body["prompt"]
    else:
        raise schema_error("Either 'prompt' (a string) or 'messages' is required")
    pieces = tokenizer.split(text)
    return {
        "count": len(pieces),
        "max_model_len": config.max_model_len,
        "tokens": tokenizer.ids(pieces),
        "token_strs": pieces if body.get("return_token_strs") is True else None,
    }


def create_app(runtime: Runtime) -> ASGIApp:
    state = runtime.state
    app = FastAPI(title="vLLM upstream simulator", docs_url=None, redoc_url=None, openapi_url=None)

    def generating(prepare: Callable[..., Response]) -> Route:
        async def generation(request: Request) -> Response:
            rec = _record_of(request)
            try:
                body = parse_json_object(await request.body(), request.headers.get("content-type"))
                return prepare(body, rec, runtime, lambda: state.next_behavior(body))
            except SimHTTPError as exc:
                state.finish(rec, "rejected", status=exc.status)
                return _error(exc)

        return generation

    def answering(answer: Callable[[dict[str, Any], SimConfig], Any]) -> Route:
        # A request answered at once (no generation): recorded completed, or rejected.
        async def answered(request: Request) -> Response:
            rec = _record_of(request)
            try:
                body = parse_json_object(await request.body(), request.headers.get("content-type"))
                payload = answer(body, state.config)
            except SimHTTPError as exc:
                state.finish(rec, "rejected", status=exc.status)
                return _error(exc)
            state.finish(rec, "completed", status=200)
            return _json(payload)

        return answered

    for path, prepare in (
        ("/v1/responses", responses_api.prepare),
        ("/v1/chat/completions", chat_api.prepare),
        ("/v1/messages", messages_api.prepare),
    ):
        app.post(path)(generating(prepare))
    for path, answer in (
        ("/v1/responses/render", responses_api.render_request),
        ("/v1/messages/count_tokens", messages_api.count_tokens),
        ("/detokenize", _detokenized),
        ("/tokenize", _tokenized),
    ):
        app.post(path)(answering(answer))

    @app.get("/metrics")
    async def metrics() -> Response:
        # The vLLM series the gateway reads: the KV cache's configuration, and the load
        # gauges the keep-warm pressure bound reads (set by tests: ``SimState.load``).
        config = state.config
        waiting, kv_usage = state.load
        labels = f'engine="0",model_name="{config.model}"'
        cache_config = (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{config.block_size}",'
            'cache_dtype="auto",enable_prefix_caching="True",engine="0"'
            f"{_capacity_label(config)}}} 1.0\n"
        )
        text = (
            (cache_config if config.reports_block_size else "")
            + "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f"vllm:kv_cache_usage_perc{{{labels}}} {float(kv_usage)}\n"
        )
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> Response:
        return _json({"version": "0.32.0"})

    @app.get("/v1/models")
    async def models() -> Response:
        config = state.config
        created = int(time.time())
        card = {
            "id": config.model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": config.model_root or config.model,
            "parent": None,
            "max_model_len": config.max_model_len,
            "permission": [
                {
                    "id": "modelperm-" + config.model,
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return _json({"object": "list", "data": [card]})

    _add_control_routes(app, state)
    return RecordingMiddleware(app, state)


def _summary(rec: RecordedRequest) -> dict[str, Any]:
    return {
        "index": rec.index,
        "method": rec.method,
        "path": rec.path,
        "headers": dict(rec.headers),
        "json": rec.json,
        "time": rec.time,
        "outcome": rec.outcome,
        "status": rec.status,
        "aborted": rec.aborted,
        "stream": rec.stream,
        "prompt_tokens": rec.prompt_tokens,
        "cached_tokens": rec.cached_tokens,
        "output_tokens": rec.output_tokens,
        "response_id": rec.response_id,
    }


def _add_control_routes(app: FastAPI, state: SimState) -> None:
    """A small HTTP control API so a test can script a simulator in another process."""

    @app.post(CONTROL_PREFIX + "push")
    async def push(request: Request) -> Response:
        data = orjson.loads(await request.body())
        specs = data if isinstance(data, list) else [data]
        try:
            behaviors = [behavior_from_json(spec) for spec in specs]
        except (TypeError, ValueError) as exc:
            return _json({"error": str(exc)}, 400)
        state.push(*behaviors)
        return _json({"pending": state.pending()})

    @app.post(CONTROL_PREFIX + "reset")
    async def reset() -> Response:
        state.reset()
        return _json({"ok": True})

    @app.post(CONTROL_PREFIX + "reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        # vLLM's /reset_prefix_cache (dev mode): drops every block, AllBlocksCleared.
        state.cache_clear()
        return _json({"ok": True})

    @app.post("/checkpoint/prepare")
    async def checkpoint_prepare() -> Response:
        # vLLM 0.34 (with --enable-sleep-mode) releases its whole KV cache here. Imitated
        # as its prefix-cache reset behaves (every block dropped, AllBlocksCleared), which
        # is what the gateway must survive; the GPU build itself is not checked here.
        state.cache_clear()
        return _json({"ok": True})

    @app.get(CONTROL_PREFIX + "requests")
    async def requests() -> Response:
        return _json([_summary(r) for r in state.requests()])

    @app.get(CONTROL_PREFIX + "stats")
    async def stats() -> Response:
        with state.lock:
            return _json(
                {
                    "calls": dict(state.calls),
                    "aborted": len(state.aborted),
                    "pending": len(state.queue),
                    "cache_blocks": state.cache.block_count(),
                }
            )


def connection_closer(server: uvicorn.Server) -> Callable[[Client], bool]:
    """Close the TCP connection of ``client`` through uvicorn's own connection set.

    ASGI gives an app no handle on its socket; uvicorn's protocol objects hold the
    transport and the peer address that appears in ``scope["client"]``.
    """

    def close(client: Client) -> bool:
        if client is None:
            return False
        for connection in list(server.server_state.connections):
            if getattr(connection, "client", None) != client:
                continue
            transport = getattr(connection, "transport", None)
            if isinstance(transport, asyncio.BaseTransport):
                transport.close()
                return True
        return False

    return close


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket (port 0: the OS picks one).

    The protocol must be given explicitly: asyncio only sets TCP_NODELAY on sockets
    whose ``proto`` is IPPROTO_TCP, and without it every response written in two
    pieces (headers, then body) stalls ~40 ms on Nagle plus delayed ACK.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def uvicorn_config(app: ASGIApp, log_level: str = "warning") -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="off",
        access_log=False,
        # Hanging requests are released on stop; this only bounds a stuck shutdown.
        timeout_graceful_shutdown=2,
        # The default 5 s keep-alive is fine; what matters is that clients reuse
        # connections so Disconnect only ever closes the one it means.
    )


def _capacity_label(config: SimConfig) -> str:
    """``num_gpu_blocks`` on the cache-config line, when the simulator reports its size."""
    if not config.reports_kv_capacity or config.cache_capacity_blocks is None:
        return ""
    return f',num_gpu_blocks="{config.cache_capacity_blocks}"'


class SimServer:
    """A simulator on ``127.0.0.1:<ephemeral port>``, served from a background thread.

    Use as a context manager (or ``start()``/``stop()``). Configuration comes from a
    ``SimConfig`` and/or keyword overrides (``SimServer(model="m", block_size=32)``).
    """

    def __init__(
        self,
        config: SimConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        **overrides: Any,
    ) -> None:
        base = config or SimConfig()
        self.config = dataclasses.replace(base, **overrides) if overrides else base
        self.host = host
        self.port = port
        self.log_level = log_level
        self.state = SimState(self.config)
        self.runtime = Runtime(self.state)
        self.app = create_app(self.runtime)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle ----------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> SimServer:
        if self._thread is not None:
            raise RuntimeError("SimServer already started")
        sock = bind_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn_config(self.app, self.log_level))
        self._server = server
        self.runtime.close_connection = connection_closer(server)
        self.runtime.stopping = asyncio.Event()
        loop_ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            loop_ready.set()
            try:
                loop.run_until_complete(server.serve(sockets=[sock]))
            finally:
                loop.close()
                sock.close()

        self._thread = threading.Thread(target=run, name=f"upstream-sim:{self.port}", daemon=True)
        self._thread.start()
        loop_ready.wait(timeout)
        self._wait_healthy(timeout)
        # The readiness probe is not something a test sent.
        self.state.clear_recordings()
        return self

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                thread = self._thread
                if thread is None or not thread.is_alive():
                    raise RuntimeError("upstream simulator thread exited during startup")
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return
                except httpx.HTTPError as exc:
                    last_error = exc
                time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"upstream simulator did not become healthy: {last_error!r}")

    def stop(self, timeout: float = 10.0) -> None:
        server, thread, loop = self._server, self._thread, self._loop
        if server is None or thread is None:
            return
        if loop is not None and not loop.is_closed():
            # Hanging requests wait on this event; asyncio objects are loop-bound, so
            # set it from the loop's own thread.
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(self.runtime.stopping.set)
        server.should_exit = True
        thread.join(timeout)
        self._server = self._thread = self._loop = None
        self.state.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- test API -----------------------------------------------------------------

    def push(self, *behaviors: Behavior) -> None:
        self.state.push(*behaviors)

    def push_for(self, agent: str, *behaviors: Behavior) -> None:
        """Behaviors for one agent of a multi-agent tree (``SimState.push_for``)."""
        self.state.push_for(agent, *behaviors)

    def requests(self, path: str | None = None) -> list[RecordedRequest]:
        return self.state.requests(path)

    def last(self, path: str | None = None) -> RecordedRequest:
        found = self.state.requests(path)
        if not found:
            raise LookupError(f"no request recorded for {path or 'any path'}")
        return found[-1]

    def calls(self, path: str) -> int:
        with self.state.lock:
            return self.state.calls[path]

    @property
    def aborted(self) -> list[RecordedRequest]:
        with self.state.lock:
            return list(self.state.aborted)

    def reset(self) -> None:
        self.state.reset()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        return self.state.wait_for(predicate, timeout)

    def wait_done(self, count: int = 1, path: str | None = None, timeout: float = 5.0) -> bool:
        """Wait until ``count`` requests (on ``path``) have a final outcome."""

        def enough() -> bool:
            return (
                sum(1 for r in self.state.recordings if r.done and path in (None, r.path)) >= count
            )

        return self.state.wait_for(enough, timeout)

    def wait_aborted(self, count: int = 1, timeout: float = 5.0) -> bool:
        return self.state.wait_for(lambda: len(self.state.aborted) >= count, timeout)
