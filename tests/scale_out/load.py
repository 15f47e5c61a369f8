"""The tier's load driver: clients of the official ``openai`` SDK through the load
balancer, each running chains (``previous_response_id``), conversations or background
jobs, every create with an ``Idempotency-Key`` and retried with it until it has an answer.

``bench agents`` runs beside it for streamed tool loops; this driver covers what the bench
has no mode for: keyed retries across a dying gateway and a restarting database,
conversations and background jobs polled to their end. Each create's input starts with a
request tag, ``[k:<16 hex>]``, that the counting tap in front of the router reads: the
number of model runs per key is counted there, not trusted from the server.

A request is *acknowledged* when a client got its response id back in a success answer
(a foreground turn ``completed`` or ``incomplete``, a background create ``queued``).
After one of four acknowledged creates, the client sends the same create with the same
key again, as one that lost the answer would: it must be a replay
(``Idempotent-Replayed: true``, the same id).
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import openai
from openai import AsyncOpenAI

from tests.scale_out.haproxy import AFFINITY_HEADER

Kind = Literal["chain", "conversation", "background"]
KINDS: tuple[Kind, ...] = ("chain", "conversation", "background")
TERMINAL = {"completed", "failed", "cancelled", "incomplete"}
# What a chain goes on from (a tiny random model ends most turns at max_output_tokens).
CONTINUABLE = {"completed", "incomplete"}
RETRY_PAUSE_SECONDS = 0.5
_WORDS = "the agent reads a file then runs the tests and edits a function before it checks"


@dataclass
class Attempt:
    at: float
    gateway: str | None
    outcome: str  # "ok", "replayed", or the error's kind ("connection", "503 database_busy")
    message: str = ""  # an error's message, as the client got it


@dataclass
class Request:
    kind: Kind
    tag: str
    client: int
    parent: str | None  # previous_response_id, or the conversation's id
    attempts: list[Attempt] = field(default_factory=list)
    response_id: str | None = None
    status: str | None = None  # background: the status polled at its end
    acknowledged_at: float | None = None
    # When the client knew the outcome: the answer, or for a background job its end.
    settled_at: float | None = None
    answered_by: str | None = None  # the gateway whose answer acknowledged it
    replay_agreed: bool | None = None  # None: no deliberate duplicate sent
    stored_error: str | None = None  # a replayed (stored) failure outcome of the key

    @property
    def acknowledged(self) -> bool:
        return self.acknowledged_at is not None


def error_kind(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"{exc.status_code} {exc.code or '-'}"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    return type(exc).__name__


def retryable(exc: Exception) -> bool:
    """Worth the same key again: the answer was lost, or the gateway said "not now"
    (a claim in progress, a database or upstream away). A refusal of the request itself
    (400, 401, 404, 422) is final."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (409, 429) or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)


def replayed(headers: Any) -> bool:
    return str(headers.get("idempotent-replayed", "")).lower() == "true"


class LoadDriver:
    def __init__(
        self,
        url: str,
        api_key: str,
        model: str,
        *,
        seed: int = 1,
        turns_per_episode: int = 4,
        max_output_tokens: int = 12,
        retry_seconds: float = 120.0,
        affinity: bool = False,
    ) -> None:
        self.client = AsyncOpenAI(
            base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=120.0
        )
        self.model = model
        self.seed = seed
        self.turns_per_episode = turns_per_episode
        self.max_output_tokens = max_output_tokens
        self.retry_seconds = retry_seconds
        self.affinity = affinity
        self.requests: list[Request] = []
        self.conversations: list[str] = []
        self.episodes = 0

    async def run(self, clients: int, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._client(index, stop) for index in range(clients)))

    async def close(self) -> None:
        await self.client.close()

    async def _client(self, index: int, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1000 + index)
        kind = KINDS[index % len(KINDS)]
        episode = 0
        while not stop.is_set():
            episode += 1
            self.episodes += 1
            headers = {AFFINITY_HEADER: f"c{index}e{episode}"} if self.affinity else {}
            parent: str | None = None
            if kind == "conversation":
                parent = await self._new_conversation(headers)
                if parent is None:
                    continue
            for _ in range(self.turns_per_episode):
                if stop.is_set():
                    break
                request = await self._turn(kind, index, parent, rng, headers)
                if request.status not in CONTINUABLE or request.response_id is None:
                    break  # the chain cannot go on from a failure; a new one starts
                if kind != "conversation":
                    parent = request.response_id
                await asyncio.sleep(rng.uniform(0.05, 0.3))

    async def _new_conversation(self, headers: dict[str, str]) -> str | None:
        deadline = time.monotonic() + self.retry_seconds
        while time.monotonic() < deadline:
            try:
                conversation = await self.client.conversations.create(extra_headers=headers)
            except Exception as exc:
                if not retryable(exc):
                    raise
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
                continue
            self.conversations.append(conversation.id)
            return conversation.id
        return None

    def _body(self, kind: Kind, tag: str, parent: str | None, rng: random.Random) -> dict[str, Any]:
        vocabulary = _WORDS.split()
        words = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(8, 24)))
        body: dict[str, Any] = {
            "model": self.model,
            "input": f"[k:{tag}] {words}",
            "max_output_tokens": self.max_output_tokens,
            "store": True,
        }
        if kind == "conversation":
            body["conversation"] = parent
        elif parent is not None:
            body["previous_response_id"] = parent
        if kind == "background":
            body["background"] = True
        return body

    async def _turn(
        self,
        kind: Kind,
        index: int,
        parent: str | None,
        rng: random.Random,
        headers: dict[str, str],
    ) -> Request:
        tag = secrets.token_hex(8)
        request = Request(kind, tag, index, parent)
        self.requests.append(request)
        body = self._body(kind, tag, parent, rng)
        keyed = {**headers, "Idempotency-Key": f"scale-out-{tag}"}
        answer = await self._create_until_answered(request, body, keyed)
        if answer is None:
            return request
        request.response_id = answer.id
        request.status = answer.status
        if rng.random() < 0.25:
            request.replay_agreed = await self._duplicate(request, body, keyed)
        if kind == "background":
            request.status = await self._poll_to_end(answer.id, headers)
        request.settled_at = time.time()
        return request

    async def _create_until_answered(
        self, request: Request, body: dict[str, Any], headers: dict[str, str]
    ) -> Any:
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                raw = await self.client.responses.with_raw_response.create(
                    **body, extra_headers=headers
                )
            except Exception as exc:
                gateway = None
                if isinstance(exc, openai.APIStatusError):
                    gateway = exc.response.headers.get("x-gateway")
                request.attempts.append(
                    Attempt(time.time(), gateway, error_kind(exc), str(exc)[:300])
                )
                if isinstance(exc, openai.APIStatusError) and replayed(exc.response.headers):
                    request.stored_error = error_kind(exc)
                    return None
                if not retryable(exc) or time.monotonic() > deadline:
                    return None
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
                continue
            gateway = raw.headers.get("x-gateway")
            outcome = "replayed" if replayed(raw.headers) else "ok"
            request.attempts.append(Attempt(time.time(), gateway, outcome))
            answer = raw.parse()
            request.acknowledged_at = time.time()
            request.answered_by = gateway
            return answer

    async def _duplicate(
        self, request: Request, body: dict[str, Any], headers: dict[str, str]
    ) -> bool:
        """The same create again, as a client that lost the answer would send it."""
        deadline = time.monotonic() + self.retry_seconds
        while time.monotonic() < deadline:
            try:
                raw = await self.client.responses.with_raw_response.create(
                    **body, extra_headers=headers
                )
            except Exception as exc:
                if not retryable(exc):
                    return False
                await asyncio.sleep(RETRY_PAUSE_SECONDS)
                continue
            return replayed(raw.headers) and raw.parse().id == request.response_id
        return False

    async def _poll_to_end(self, response_id: str, headers: dict[str, str]) -> str | None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                response = await self.client.responses.retrieve(response_id, extra_headers=headers)
            except Exception as exc:
                if not retryable(exc):
                    raise
            else:
                if response.status in TERMINAL:
                    return response.status
            await asyncio.sleep(0.5)
        return None
