"""What the upstream can tell us about tokens: detected at start-up, learned from turns,
kept per served model.

At start-up, without generating anything: whether the upstream is a vLLM (``/version``
answers, or the render endpoint exists, enabled or not), whether the render endpoint
(``/v1/responses/render``, ``--enable-scale-out``) answers, whether ``/detokenize`` does,
the KV block size vLLM reports in ``/metrics`` (``vllm:cache_config_info``), and an
identity for the tokenizer and chat template (a digest of ``/tokenizer_info`` when vLLM
exposes it, else the model's ``root`` from ``/v1/models``).

Whether ``enable_response_messages`` returns exact token ids (JSON; streamed) is learned
from the turns themselves: a vLLM accepts and ignores fields it does not know, so stored
turns ask for ids until an answer comes back without them; then that model stops asking
for ``RETRY_ASKING_SECONDS``. ``required`` mode proves it at start-up instead, with one
one-token request of each kind, and refuses to start without.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from agentic_api.errors import ApiError
from agentic_api.log import get_logger
from agentic_api.settings import ConfigError
from agentic_api.upstream.client import UpstreamClient
from agentic_api.upstream.token_fields import ReportedTokens, take_reported_tokens
from lineage import canonical_json, sha256_hex

log = get_logger("agentic_api.upstream.capabilities")

TokenArtifactMode = Literal["off", "auto", "required"]
PROBE_INPUT = "Say OK."
PROBE_SECONDS = 30.0
# The engine's KV block size, as its /metrics states its cache config.
_BLOCK_SIZE = re.compile(r'^vllm:cache_config_info\{[^}]*\bblock_size="(\d+)"', re.MULTILINE)
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True)
class TokenCapabilities:
    """What one served model's upstream offers for token-level accounting."""

    model: str
    # The upstream is a vLLM (it accepts, and ignores, request fields it does not know).
    vllm: bool
    # enable_response_messages returns exact prompt and output ids, JSON and streamed:
    # True, False, or None while not known (then a vLLM is asked, and the answer tells).
    response_ids: bool | None
    streamed_response_ids: bool | None
    render: bool
    detokenize: bool
    block_size: int | None
    # Identity of the tokenizer and chat template; "" when the upstream exposes none.
    tokenizer: str
    # Why something is missing, in words (for logs and the start-up failure).
    notes: tuple[str, ...] = field(default=())

    def ids_for(self, streamed: bool) -> bool:
        """Whether a turn (streamed or not) should ask for token ids."""
        known = self.streamed_response_ids if streamed else self.response_ids
        return self.vllm if known is None else known


class CapabilityError(ConfigError):
    """``AGENTIC_TOKEN_ARTIFACTS=required`` and the upstream cannot give token ids."""


async def probe_model(
    client: UpstreamClient, model: str, card: dict[str, Any]
) -> TokenCapabilities:
    """What can be learned without generating; raises ``ApiError`` when unreachable."""
    notes: list[str] = []
    status, answer = await client.fetch(
        "POST",
        "v1/responses/render",
        body=canonical_json({"model": model, "input": PROBE_INPUT, "store": False}),
        total_seconds=PROBE_SECONDS,
    )
    rendered = _object(answer).get("token_ids") if status == 200 else None
    render = isinstance(rendered, list)
    if not render:
        notes.append(f"no render endpoint (/v1/responses/render answered {status})")
    version_status, version = await client.fetch("GET", "version", total_seconds=PROBE_SECONDS)
    vllm = status in (200, 403) or (version_status == 200 and "version" in _object(version))
    sample = [t for t in rendered[:4] if type(t) is int] if isinstance(rendered, list) else [0]
    status, answer = await client.fetch(
        "POST",
        "detokenize",
        body=orjson.dumps({"model": model, "tokens": sample or [0]}),
        total_seconds=PROBE_SECONDS,
    )
    detokenize = status == 200 and isinstance(_object(answer).get("prompt"), str)
    return TokenCapabilities(
        model=model,
        vllm=vllm,
        response_ids=None,
        streamed_response_ids=None,
        render=render,
        detokenize=detokenize,
        block_size=await _block_size(client),
        tokenizer=await _tokenizer_identity(client, card),
        notes=tuple(notes),
    )


async def prove_response_ids(
    client: UpstreamClient, capabilities: TokenCapabilities
) -> TokenCapabilities:
    """Asks for one token, JSON and streamed, with ``enable_response_messages``."""
    notes = list(capabilities.notes)
    body = {
        "model": capabilities.model,
        "input": PROBE_INPUT,
        "store": False,
        "max_output_tokens": 1,
        "temperature": 0,
        "enable_response_messages": True,
    }
    status, answer = await client.fetch(
        "POST",
        "v1/responses",
        body=canonical_json({**body, "stream": False}),
        total_seconds=PROBE_SECONDS,
    )
    plain = False
    if status != 200:
        notes.append(f"a request with enable_response_messages answered {status}")
    else:
        found = take_reported_tokens(_object(answer))
        plain = isinstance(found, ReportedTokens)
        if not isinstance(found, ReportedTokens):
            notes.append(found.reason)
    streamed = await _streamed_ids(client, canonical_json({**body, "stream": True}), notes)
    return replace(
        capabilities, response_ids=plain, streamed_response_ids=streamed, notes=tuple(notes)
    )


async def _streamed_ids(client: UpstreamClient, body: bytes, notes: list[str]) -> bool:
    try:
        async with client.stream_response(body, {}) as stream:
            async for sse in stream.events():
                try:
                    event = orjson.loads(sse.data)
                except orjson.JSONDecodeError:
                    continue
                response = event.get("response") if isinstance(event, dict) else None
                if event.get("type") in _TERMINAL and isinstance(response, dict):
                    found = take_reported_tokens(response)
                    if isinstance(found, ReportedTokens):
                        return True
                    notes.append(f"streamed: {found.reason}")
                    return False
    except ApiError as exc:
        if exc.status_code in (502, 504):
            raise
        notes.append(f"a streamed request with enable_response_messages failed: {exc.message}")
        return False
    notes.append("streamed: no terminal event")
    return False


async def _block_size(client: UpstreamClient) -> int | None:
    status, text = await client.fetch("GET", "metrics", total_seconds=PROBE_SECONDS)
    if status != 200:
        return None
    found = _BLOCK_SIZE.search(text.decode("utf-8", "replace"))
    return int(found.group(1)) if found else None


async def _tokenizer_identity(client: UpstreamClient, card: dict[str, Any]) -> str:
    status, answer = await client.fetch("GET", "tokenizer_info", total_seconds=PROBE_SECONDS)
    info = _object(answer) if status == 200 else {}
    if info:
        return "tokenizer_info:" + sha256_hex(canonical_json(info))[:32]
    root = card.get("root")
    return f"root:{root}" if isinstance(root, str) and root else ""


def _object(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class TokenCapabilityMemo:
    """The capabilities per model, for the turn pipeline (which never waits on a probe: a
    model not detected yet is simply not recorded)."""

    RETRY_PROBE_SECONDS = 30.0
    RETRY_ASKING_SECONDS = 600.0

    def __init__(
        self, client: UpstreamClient, mode: TokenArtifactMode, block_size: int | None = None
    ) -> None:
        self._client = client
        self.mode = mode
        self._block_size = block_size
        self._by_model: dict[str, TokenCapabilities] = {}
        # (model, streamed) -> when an answer came back without ids.
        self._refused: dict[tuple[str, bool], float] = {}
        self._retry: asyncio.Task[None] | None = None

    def get(self, model: str) -> TokenCapabilities | None:
        if self.mode == "off":
            return None
        found = self._by_model.get(model)
        if found is None or self.mode == "required":
            return found
        now = time.monotonic()
        for streamed in (False, True):
            since = self._refused.get((model, streamed))
            if since is not None and now - since >= self.RETRY_ASKING_SECONDS:
                # Long enough: the upstream may have been upgraded; ask again.
                del self._refused[(model, streamed)]
                found = _with_ids(found, streamed, None)
        self._by_model[model] = found
        return found

    def block_size(self, capabilities: TokenCapabilities | None) -> int | None:
        """The setting, else what the upstream reports; None when neither says. Never a
        default: vLLM's changed from 16 to 64 (0.34), and an assumed size would turn every
        expected figure into a wrong one rather than an unknown one."""
        if self._block_size is not None:
            return self._block_size
        if capabilities is not None and capabilities.block_size:
            return capabilities.block_size
        return None

    def observed(self, model: str, streamed: bool, *, ids: bool) -> None:
        """A turn asked for ids and got them, or an answer that carried none."""
        known = self._by_model.get(model)
        if (
            known is None
            or (known.streamed_response_ids if streamed else known.response_ids) is ids
        ):
            return
        if not ids:
            log.warning("the upstream returns no token ids", model=model, streamed=streamed)
            self._refused[(model, streamed)] = time.monotonic()
        self._by_model[model] = _with_ids(known, streamed, ids)

    async def detect(self) -> list[TokenCapabilities]:
        """Probes every model the upstream serves; raises ``ApiError`` if unreachable."""
        listing = await self._client.models()
        found: list[TokenCapabilities] = []
        for card in listing.get("data") or ():
            model = card.get("id") if isinstance(card, dict) else None
            if isinstance(model, str):
                capabilities = await probe_model(self._client, model, card)
                if self.mode == "required":
                    capabilities = await prove_response_ids(self._client, capabilities)
                found.append(capabilities)
        for capabilities in found:
            self._by_model[capabilities.model] = capabilities
            log.info(
                "upstream token capabilities",
                model=capabilities.model,
                vllm=capabilities.vllm,
                response_ids=capabilities.response_ids,
                streamed_response_ids=capabilities.streamed_response_ids,
                render=capabilities.render,
                block_size=capabilities.block_size,
                notes=list(capabilities.notes),
            )
        return found

    async def start(self) -> None:
        """At start-up: ``required`` fails unless every served model returns ids;
        ``auto`` probes once and, if the upstream is not reachable yet, keeps retrying in
        the background."""
        if self.mode == "off":
            return
        try:
            found = await self.detect()
        except ApiError as exc:
            if self.mode == "required":
                raise CapabilityError(
                    "AGENTIC_TOKEN_ARTIFACTS=required, but the upstream could not be "
                    f"probed: {exc.message}"
                ) from exc
            log.warning("upstream token capabilities not detected yet", reason=exc.message)
            self._retry = asyncio.get_running_loop().create_task(self._retry_later())
            return
        if self.mode == "required":
            lacking = [c for c in found if not (c.response_ids and c.streamed_response_ids)]
            if not found or lacking:
                why = (
                    "; ".join(f"{c.model}: {', '.join(c.notes) or 'no token ids'}" for c in lacking)
                    or "it serves no model"
                )
                raise CapabilityError(
                    "AGENTIC_TOKEN_ARTIFACTS=required, but the upstream does not return "
                    f"token ids with enable_response_messages ({why}). Serve the model "
                    "with vLLM 0.32 or later, or set AGENTIC_TOKEN_ARTIFACTS=auto or off."
                )

    async def _retry_later(self) -> None:
        while True:
            await asyncio.sleep(self.RETRY_PROBE_SECONDS)
            try:
                await self.detect()
                return
            except ApiError as exc:
                log.warning("upstream token capabilities not detected", reason=exc.message)

    async def aclose(self) -> None:
        if self._retry is not None:
            self._retry.cancel()


def _with_ids(known: TokenCapabilities, streamed: bool, ids: bool | None) -> TokenCapabilities:
    if streamed:
        return replace(known, streamed_response_ids=ids)
    return replace(known, response_ids=ids)
