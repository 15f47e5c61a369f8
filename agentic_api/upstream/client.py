"""HTTP client for the model server. Every turn is one stateless, streamed request."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson

from agentic_api.errors import ApiError
from agentic_api.upstream.errors import from_status, from_transport
from agentic_api.upstream.sse import SseEvent, parse_sse


class UpstreamStream:
    """An open SSE stream from the upstream's /v1/responses."""

    def __init__(self, response: httpx.Response, base_url: str) -> None:
        self._response = response
        self._base_url = base_url
        self.headers = response.headers

    async def events(self) -> AsyncIterator[SseEvent]:
        try:
            async for event in parse_sse(self._response.aiter_lines()):
                yield event
        except httpx.HTTPError as exc:
            raise from_transport(exc, self._base_url, sent=True) from exc


class UpstreamClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 300.0,
        models_cache_seconds: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            transport=transport,
        )
        self._models_cache_seconds = models_cache_seconds
        self._models: tuple[float, dict[str, Any]] | None = None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> None:
        response = await self._request("GET", "/health", timeout=2.0)
        if response.status_code != 200:
            raise from_status(response.status_code, response.content)

    async def models(self) -> dict[str, Any]:
        now = time.monotonic()
        if self._models is not None and now - self._models[0] < self._models_cache_seconds:
            return self._models[1]
        response = await self._request("GET", "/v1/models")
        if response.status_code != 200:
            raise from_status(response.status_code, response.content)
        body = _json_object(response)
        self._models = (now, body)
        return body

    async def post_json(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        response = await self._request("POST", path, content=orjson.dumps(body))
        if response.status_code != 200:
            raise from_status(response.status_code, response.content)
        return _json_object(response)

    async def create_response(self, body: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
        """POST a prepared /v1/responses body with ``stream: false``; the response object."""
        try:
            response = await self._http.post(
                "/v1/responses",
                content=body,
                headers={**headers, "content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise from_transport(exc, self.base_url, sent=True) from exc
        if response.status_code != 200:
            raise from_status(response.status_code, response.content)
        return _json_object(response)

    @asynccontextmanager
    async def stream_response(
        self, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[UpstreamStream]:
        """POST a prepared /v1/responses body (``stream: true``) and yield the event stream."""
        request = self._http.build_request(
            "POST",
            "/v1/responses",
            content=body,
            headers={**headers, "content-type": "application/json", "accept": "text/event-stream"},
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise from_transport(exc, self.base_url) from exc
        try:
            if response.status_code != 200:
                raise from_status(response.status_code, await _read(response, self.base_url))
            yield UpstreamStream(response, self.base_url)
        finally:
            await response.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise from_transport(exc, self.base_url) from exc


async def _read(response: httpx.Response, base_url: str) -> bytes:
    try:
        return await response.aread()
    except httpx.HTTPError as exc:
        raise from_transport(exc, base_url) from exc


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise ApiError(
            "The model server answered with invalid JSON.", status_code=502, code="upstream_error"
        ) from exc
    if not isinstance(body, dict):
        raise ApiError(
            "The model server answered with an unexpected body.",
            status_code=502,
            code="upstream_error",
        )
    return body
