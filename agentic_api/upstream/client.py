"""HTTP client for the model server. Every turn is one stateless request.

aiohttp rather than httpx for this leg: it is on every turn's critical path, and measured
against the simulator with a depth-40 body (12 KB) it spends ~0.45 ms of CPU per request
where httpx spends ~1.4 ms (docs/benchmarks/overhead/README.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from agentic_api.errors import ApiError
from agentic_api.upstream.errors import UpstreamInvalidAnswer, from_status, from_transport
from agentic_api.upstream.sse import SseDecoder, SseEvent

# Idle connections are dropped before a typical server would (uvicorn, which vLLM runs
# on, closes them after 5 s), so a request is not sent on a connection being closed.
KEEPALIVE_SECONDS = 4.0
_JSON = {"content-type": "application/json"}
_EVENT_STREAM = {"content-type": "application/json", "accept": "text/event-stream"}


class SilenceLimit:
    """Fails a stream that sends nothing for ``seconds``, as aiohttp's ``sock_read`` does,
    with one timer per quiet period instead of one per chunk: aiohttp cancels and re-arms
    its timer for every chunk received (~2.4 µs under uvloop, several percent of relaying
    an event), where here a chunk costs one clock read and the timer, when it fires early,
    is set again for the end of the silence so far."""

    __slots__ = ("_handle", "_loop", "_protocol", "_response", "_seconds", "heard_at")

    def __init__(self, response: aiohttp.ClientResponse, seconds: float) -> None:
        self._response = response
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        connection = response.connection
        self._protocol = None if connection is None else connection.protocol
        if self._protocol is not None:
            # aiohttp's own timer (it bounded the wait for the head) stops at the next
            # chunk; aiohttp sets it again for the connection's next request.
            self._protocol.read_timeout = None
        self.heard_at = self._loop.time()
        self._handle = self._loop.call_at(self.heard_at + seconds, self._check)

    def heard(self) -> None:
        self.heard_at = self._loop.time()

    def stop(self) -> None:
        self._handle.cancel()

    def _check(self) -> None:
        if self._response.connection is None:
            # Released (the stream ended; its generator not yet closed): the connection
            # may serve another request now, which this limit must never touch.
            return
        quiet_until = self.heard_at + self._seconds
        if self._loop.time() < quiet_until:
            self._handle = self._loop.call_at(quiet_until, self._check)
            return
        # What aiohttp's own timeout does: the connection is not reused, the read fails.
        error = aiohttp.SocketTimeoutError("Timeout on reading data from socket")
        if self._protocol is not None:
            self._protocol.set_exception(error)
        self._response.content.set_exception(error)


class UpstreamStream:
    """An open SSE stream from the upstream (/v1/responses or /v1/messages)."""

    def __init__(
        self, response: aiohttp.ClientResponse, base_url: str, read_timeout: float | None
    ) -> None:
        self._response = response
        self._base_url = base_url
        self._read_timeout = read_timeout
        self.headers: CIMultiDictProxy[str] = response.headers

    async def event_batches(self) -> AsyncIterator[list[SseEvent]]:
        """The stream's events, a list per chunk read from the socket (the events it
        completed; chunks that complete none yield nothing). The relay takes a chunk's
        events in one step and writes them to its client together; one resumption of
        this generator per chunk, not per event."""
        seconds = self._read_timeout
        silence = None if seconds is None else SilenceLimit(self._response, seconds)
        try:
            # One generator between the socket and the pump: the decoder is synchronous.
            decoder = SseDecoder()
            feed = decoder.feed
            async for chunk in self._response.content.iter_any():
                if silence is not None:
                    silence.heard()
                events = feed(chunk)
                if events:
                    yield events
            events = decoder.end()
            if events:
                yield events
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise from_transport(exc, self._base_url, sent=True) from exc
        finally:
            if silence is not None:
                silence.stop()

    async def events(self) -> AsyncIterator[SseEvent]:
        """The stream's events one by one."""
        async for batch in self.event_batches():
            for event in batch:
                yield event


class UpstreamClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 300.0,
        models_memo_seconds: float = 10.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        # ``sock_read`` bounds each wait for bytes, not the whole answer: a long
        # generation that keeps streaming is never cut off.
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout, sock_read=read_timeout
        )
        self._session: aiohttp.ClientSession | None = None
        self._models_memo_seconds = models_memo_seconds
        self._models: tuple[float, dict[str, Any]] | None = None

    @property
    def _http(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running event loop that will own it.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                base_url=self.base_url + "/",
                headers=self._headers,
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(
                    limit=0, keepalive_timeout=KEEPALIVE_SECONDS, enable_cleanup_closed=True
                ),
                auto_decompress=True,
                # Cookies an upstream (or a router in front of it) sets are not kept: they
                # would be shared by every tenant's turns, and handling them costs time.
                cookie_jar=aiohttp.DummyCookieJar(),
                # Our own line splitting (sse.SseDecoder) has no line-length limit.
                read_bufsize=2**16,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def health(self) -> None:
        status, body = await self._request("GET", "health", total_seconds=2.0)
        if status != 200:
            raise from_status(status, body)

    async def models(self) -> dict[str, Any]:
        now = time.monotonic()
        if self._models is not None and now - self._models[0] < self._models_memo_seconds:
            return self._models[1]
        status, body = await self._request("GET", "v1/models")
        if status != 200:
            raise from_status(status, body)
        listing = _json_object(body)
        self._models = (now, listing)
        return listing

    async def post_json(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        status, answer = await self._request(
            "POST", path.lstrip("/"), data=orjson.dumps(body), headers=_JSON
        )
        if status != 200:
            raise from_status(status, answer)
        return _json_object(answer)

    async def create_response(self, body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
        """POST a prepared /v1/responses body with ``stream: false``; the response object."""
        status, answer = await self._request(
            "POST", "v1/responses", data=body, headers={**headers, **_JSON}, sent=True
        )
        if status != 200:
            raise from_status(status, answer)
        try:
            return _json_object(answer)
        except ApiError as exc:
            raise UpstreamInvalidAnswer(exc.message) from exc

    async def render_response(self, body: bytes, headers: Mapping[str, str]) -> list[int]:
        """The prompt token ids vLLM would prefill for a /v1/responses body, from its
        render endpoint (``--enable-scale-out``); nothing is generated."""
        status, answer = await self._request(
            "POST", "v1/responses/render", data=body, headers={**headers, **_JSON}
        )
        if status != 200:
            raise from_status(status, answer)
        ids = _json_object(answer).get("token_ids")
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise ApiError(
                "The model server's render answer has no token ids.",
                status_code=502,
                code="upstream_error",
            )
        return ids

    async def detokenize(self, model: str, tokens: list[int]) -> str:
        """The text of ``tokens`` (vLLM's ``/detokenize``)."""
        answer = await self.post_json("detokenize", {"model": model, "tokens": tokens})
        text = answer.get("prompt")
        if not isinstance(text, str):
            raise ApiError(
                "The model server's detokenize answer has no text.",
                status_code=502,
                code="upstream_error",
            )
        return text

    async def fetch(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        total_seconds: float | None = None,
    ) -> tuple[int, bytes]:
        """One request of any kind, read to its end: (status, body). For probing what the
        upstream offers; transport failures raise like every other call."""
        kwargs: dict[str, Any] = {} if body is None else {"data": body, "headers": _JSON}
        return await self._request(method, path.lstrip("/"), total_seconds=total_seconds, **kwargs)

    @asynccontextmanager
    async def stream_response(
        self, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[UpstreamStream]:
        """POST a prepared /v1/responses body (``stream: true``) and yield the event stream."""
        async with self._stream("v1/responses", body, headers) as stream:
            yield stream

    # -- the Anthropic Messages API (vLLM serves /v1/messages natively) -----------------

    async def create_message(
        self, body: bytes, headers: Mapping[str, str]
    ) -> tuple[bytes, dict[str, Any]]:
        """POST a prepared /v1/messages body without streaming: the answer's bytes, to be
        relayed as they are, and the same answer parsed (for its usage)."""
        status, answer = await self._request(
            "POST", "v1/messages", data=body, headers={**headers, **_JSON}, sent=True
        )
        if status != 200:
            raise from_status(status, answer)
        return answer, _json_object(answer)

    @asynccontextmanager
    async def stream_message(
        self, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[UpstreamStream]:
        """POST a prepared /v1/messages body (``stream: true``) and yield its event stream;
        a refusal before the stream starts is raised here, as an ``ApiError``."""
        async with self._stream("v1/messages", body, headers) as stream:
            yield stream

    @asynccontextmanager
    async def _stream(
        self, path: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[UpstreamStream]:
        """POST ``body`` asking for server-sent events; a refusal before the stream starts
        (any status but 200) is raised as an ``ApiError``."""
        try:
            response = await self._http.post(path, data=body, headers={**headers, **_EVENT_STREAM})
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise from_transport(exc, self.base_url) from exc
        try:
            if response.status != 200:
                raise from_status(response.status, await self._read(response))
            yield UpstreamStream(response, self.base_url, self._timeout.sock_read)
        finally:
            response.release()
            response.close()

    async def count_message_tokens(
        self, body: bytes, headers: Mapping[str, str]
    ) -> tuple[bytes, dict[str, Any]]:
        """POST a prepared /v1/messages/count_tokens body: the answer's bytes and parsed."""
        status, answer = await self._request(
            "POST", "v1/messages/count_tokens", data=body, headers={**headers, **_JSON}
        )
        if status != 200:
            raise from_status(status, answer)
        return answer, _json_object(answer)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        sent: bool = False,
        total_seconds: float | None = None,
        **kwargs: Any,
    ) -> tuple[int, bytes]:
        """One request read to its end: (status, body). ``sent``: see ``from_transport``."""
        if total_seconds is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(total=total_seconds)
        try:
            async with self._http.request(method, path, **kwargs) as response:
                return response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise from_transport(exc, self.base_url, sent=sent) from exc

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        try:
            return await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise from_transport(exc, self.base_url) from exc


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(
            "The model server answered with invalid JSON.", status_code=502, code="upstream_error"
        ) from exc
    if not isinstance(value, dict):
        raise ApiError(
            "The model server answered with an unexpected body.",
            status_code=502,
            code="upstream_error",
        )
    return value
