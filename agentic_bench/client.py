"""The benchmark's HTTP client: one Responses create at a time, timed, over httpx."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

# Where an upstream or router may say which replica served a request.
REPLICA_HEADERS = ("x-upstream-replica", "x-served-by", "x-worker-url", "x-vllm-replica")


class BenchError(Exception):
    """A request of the benchmark failed; the run stops rather than report bad numbers.
    ``status``: the HTTP status when the server answered one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class TurnResult:
    id: str
    latency: float
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    output: list[dict[str, Any]]
    replica: str | None
    status: str
    # Streamed requests only: seconds to the first generated token's event.
    ttft: float | None = None


@dataclass
class Target:
    """A Responses endpoint. ``stateful``: a server that stores turns (ours, a peer): the
    client sends ``previous_response_id``. Otherwise a raw upstream (vLLM, a router): the
    client carries the history and sends ``store: false`` with its own ``cache_salt``."""

    name: str
    base_url: str
    stateful: bool
    api_key: str | None = None
    timeout: float = 300.0
    replica_headers: tuple[str, ...] = REPLICA_HEADERS
    _http: httpx.AsyncClient | None = field(default=None, repr=False)

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            root = self.base_url.rstrip("/").removesuffix("/v1")
            self._http = httpx.AsyncClient(
                base_url=root,
                headers=headers,
                timeout=self.timeout,
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=256),
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def first_model(self) -> str:
        response = await self.http.get("/v1/models")
        if response.status_code != 200:
            raise BenchError(f"{self.name}: GET /v1/models answered {response.status_code}")
        data = response.json().get("data") or []
        if not data:
            raise BenchError(f"{self.name}: /v1/models lists no model")
        return str(data[0]["id"])

    async def create(
        self, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> TurnResult:
        started = time.perf_counter()
        try:
            response = await self.http.post("/v1/responses", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise BenchError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        latency = time.perf_counter() - started
        if response.status_code != 200:
            raise BenchError(
                f"{self.name}: /v1/responses answered {response.status_code}: "
                f"{response.text[:300]}",
                response.status_code,
            )
        return _result(response.json(), latency, self._replica(response.headers))

    async def create_streamed(
        self, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> TurnResult:
        """The same create with ``stream: true``: timed to the first generated token (text,
        function-call arguments or reasoning) and to the terminal event."""
        started = time.perf_counter()
        ttft: float | None = None
        final: dict[str, Any] | None = None
        try:
            async with self.http.stream(
                "POST", "/v1/responses", json={**body, "stream": True}, headers=headers
            ) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode(errors="replace")
                    raise BenchError(
                        f"{self.name}: /v1/responses answered {response.status_code}: {text[:300]}",
                        response.status_code,
                    )
                replica = self._replica(response.headers)
                async for line in response.aiter_lines():
                    data = line[5:].strip() if line.startswith("data:") else ""
                    if not data.startswith("{"):
                        continue  # blank lines, event names, a closing "[DONE]" (the peer's)
                    event = json.loads(data)
                    kind = str(event.get("type", ""))
                    if ttft is None and kind.endswith(".delta"):
                        ttft = time.perf_counter() - started
                    if kind == "error":
                        raise BenchError(f"{self.name}: error event: {line[:300]}")
                    if kind in TERMINAL_EVENTS:
                        final = event.get("response") or {}
        except httpx.HTTPError as exc:
            raise BenchError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if final is None:
            raise BenchError(f"{self.name}: the stream ended without a terminal event")
        result = _result(final, time.perf_counter() - started, replica)
        result.ttft = ttft
        return result

    def _replica(self, headers: httpx.Headers) -> str | None:
        return next((headers[h] for h in self.replica_headers if h in headers), None)


TERMINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def _result(data: dict[str, Any], latency: float, replica: str | None) -> TurnResult:
    usage = data.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    return TurnResult(
        id=str(data.get("id")),
        latency=latency,
        input_tokens=int(usage.get("input_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        output=[item for item in data.get("output") or [] if isinstance(item, dict)],
        replica=replica,
        status=str(data.get("status")),
    )


def message(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": text}


def replayable(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output items a client carrying the history sends back as input (verbatim)."""
    return [item for item in output if item.get("type") != "reasoning" or item.get("content")]


def filler_text(words: int, seed: str) -> str:
    """Deterministic prose of about ``words`` words; ``seed`` makes it unique (cold)."""
    parts = [f"[{seed}]"]
    for index in range(words // 10 + 1):
        parts.append(
            f"Step {index}: the agent opened src/module_{index % 37}.py, read "
            f"{(index * 7) % 211} lines and noted a change."
        )
    return " ".join(parts)
