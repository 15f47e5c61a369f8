"""Pure ASGI middleware (no BaseHTTPMiddleware, so streaming responses are never buffered)."""

from __future__ import annotations

import gzip
import io
import time
import zlib
from typing import Any

import orjson
import structlog
import zstandard
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_api.errors import ApiError, InvalidRequest, PayloadTooLarge
from agentic_api.http.errors import error_body, error_response, unexpected_error_response
from agentic_api.log import get_logger
from agentic_api.metrics import observe_request
from lineage import mint_id
from lineage.ids import IdKind

log = get_logger("agentic_api.access")

REQUEST_ID_HEADER = b"x-request-id"


def new_request_id() -> str:
    return "req_" + mint_id(IdKind.ITEM).split("_", 1)[1]


class RequestContextMiddleware:
    """Gives every request an id (header ``x-request-id``), binds it into logs, logs access."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        status_holder: dict[str, int] = {}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER, request_id.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "websocket.accept":
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER, request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            method = scope.get("method", "WS")
            # Exceptions that escape the app are answered 500 by the server.
            status = status_holder.get("status", 101 if method == "WS" else 500)
            log.info(
                "request",
                method=method,
                path=scope.get("path"),
                status=status,
                duration_ms=round(seconds * 1000, 2),
            )
            observe_request(method, route_template(scope), status, seconds)


def route_template(scope: Scope) -> str:
    """The matched route's path template (bounded label values), or ``unmatched``."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else "unmatched"


class UnhandledErrorMiddleware:
    """Answers 500 for an exception no handler took, and keeps the connection usable.

    Starlette's outermost error handler sends its 500 and then re-raises, and the server
    drops the keep-alive connection without ``Connection: close``: a client's next
    request on it fails. Caught here, inside the request-id middleware, the 500 is an
    ordinary response. An exception after the response started (a stream cut short) is
    re-raised: the server must close that connection, the body being incomplete.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except ApiError as exc:
            # Raised outside the routes (a middleware's own database read): it still
            # deserves its own status and code, not an unhandled 500.
            if started:
                raise
            await error_response(exc, path=scope["path"])(scope, receive, send)
        except Exception:
            if started:
                raise
            await unexpected_error_response(Request(scope))(scope, receive, send)


class UrlMiddleware:
    """Refuses a path or query string that carries NUL (``%00``) with a 400, before
    routing: no id, cursor or filter can contain it, and PostgreSQL refuses it as a
    statement parameter (an unhandled 500 otherwise)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (
            "\x00" in scope["path"] or b"%00" in scope.get("query_string", b"")
        ):
            where = "path" if "\x00" in scope["path"] else "query"
            await _send_error(
                send,
                InvalidRequest(
                    f"The request {where} must not contain the NUL character (%00).",
                    code="invalid_value",
                ),
                scope["path"],
            )
            return
        await self.app(scope, receive, send)


class BodyMiddleware:
    """Enforces the body size limit and undoes ``Content-Encoding: gzip|zstd|deflate``.

    The limit applies to the decompressed size, so a small compressed bomb is refused too.
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        encoding = headers.get(b"content-encoding", b"identity").decode("latin-1").strip().lower()
        declared = headers.get(b"content-length")
        try:
            if declared is not None and int(declared) > self.max_body_bytes:
                raise self._too_large()
            raw = await self._read_body(receive)
            body = self._decode(raw, encoding)
        except ApiError as exc:
            await _send_error(send, exc, scope.get("path", ""))
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if encoding != "identity":
            kept = [(k, v) for k, v in scope["headers"] if k.lower() not in _ENCODING_HEADERS]
            kept.append((b"content-length", str(len(body)).encode()))
            # In place, so outer middleware sees what routing adds (the matched route).
            scope["headers"] = kept
        await self.app(scope, replay, send)

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _decode(self, raw: bytes, encoding: str) -> bytes:
        if encoding in ("identity", ""):
            return raw
        try:
            if encoding == "zstd":
                reader = zstandard.ZstdDecompressor().stream_reader(raw)
                return self._bounded(reader.read, reader.close)
            if encoding in ("gzip", "x-gzip"):
                stream = gzip.GzipFile(fileobj=io.BytesIO(raw))
                return self._bounded(stream.read, stream.close)
            if encoding == "deflate":
                inflater = zlib.decompressobj()
                out = inflater.decompress(raw, self.max_body_bytes + 1)
                if len(out) > self.max_body_bytes:
                    raise self._too_large()
                return out
        except ApiError:
            raise
        except Exception as exc:
            raise InvalidRequest(
                f"request body could not be decoded as {encoding}", code="invalid_body_encoding"
            ) from exc
        raise InvalidRequest(
            f"unsupported Content-Encoding {encoding!r} (use gzip, zstd or deflate)",
            code="unsupported_content_encoding",
        )

    def _bounded(self, read: Any, close: Any) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                chunk = read(65536)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise self._too_large()
                chunks.append(chunk)
        finally:
            close()

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body exceeds the limit of {self.max_body_bytes} bytes",
        )


_ENCODING_HEADERS = (b"content-encoding", b"content-length")


async def _send_error(send: Send, error: ApiError, path: str) -> None:
    body = orjson.dumps(error_body(error, path))
    await send(
        {
            "type": "http.response.start",
            "status": error.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
