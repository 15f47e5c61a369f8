"""``POST /v1/chat/completions`` as vLLM 0.32 answers it (JSON and ``data:`` SSE)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from . import tokenizer
from .behaviors import Behavior
from .common import (
    cache_salt_shape,
    check_cache_salt,
    check_model,
    chunk_text,
    new_id,
    optional_bool,
    optional_int,
    output_too_large,
    sse_data,
)
from .errors import SimHTTPError, error_body, schema_error
from .exchange import Exchange, Runtime, StreamPlan, open_exchange
from .generation import Generation, default_reply
from .render import render_chat
from .state import Headers, RecordedRequest, SimConfig

Json = dict[str, Any]


def _validate(body: Mapping[str, Any], config: SimConfig) -> str | None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise schema_error("messages: Field required" if messages is None else "messages: invalid")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise schema_error("tools: Input should be a valid list")
    salt = cache_salt_shape(body)
    optional_int(body, "max_tokens", 1)
    optional_int(body, "max_completion_tokens", 1)
    optional_bool(body, "stream")
    check_model(body, config)
    check_cache_salt(salt)
    return salt


def _request_id(body: Mapping[str, Any], headers: Headers) -> str:
    header = headers.get("x-request-id")
    if header:
        return header
    field = body.get("request_id")
    return field if isinstance(field, str) and field else new_id("")


def prepare(
    body: Json,
    rec: RecordedRequest,
    runtime: Runtime,
    next_behavior: Callable[[], Behavior | None],
) -> Exchange:
    state = runtime.state
    config = state.config
    salt = _validate(body, config)
    add_generation_prompt = body.get("add_generation_prompt", True) is not False
    rendered = render_chat(
        body["messages"], body.get("tools"), add_generation_prompt=add_generation_prompt
    )
    prompt = tokenizer.tokenize(rendered.text)
    limit = config.max_model_len
    if len(prompt) >= limit:
        raise SimHTTPError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your request "
            f"has {len(prompt)} input tokens. Please reduce the length of the input messages.",
            param="input_tokens",
        )
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(requested, int) and len(prompt) + requested > limit:
        raise SimHTTPError(
            400,
            output_too_large(requested, limit, len(prompt)),
            param="max_tokens",
        )
    max_tokens = requested if isinstance(requested, int) else limit - len(prompt)

    behavior = next_behavior() or default_reply(rendered, config)
    completion_id = "chatcmpl-" + _request_id(body, rec.headers)
    return open_exchange(
        runtime,
        rec,
        body,
        behavior=behavior,
        rendered=rendered,
        prompt=prompt,
        salt=salt,
        max_tokens=max_tokens,
        response_id=completion_id,
        shaper=_Shaper(body, config, completion_id, prompt),
    )


def _finish_reason(gen: Generation) -> str:
    if gen.truncated:
        return "length"
    if any(gp.part.kind == "call" for gp in gen.parts):
        return "tool_calls"
    return "stop"


class _Shaper:
    def __init__(
        self, body: Json, config: SimConfig, completion_id: str, prompt: list[int]
    ) -> None:
        self.body = body
        self.config = config
        self.completion_id = completion_id
        self.prompt = prompt
        self.created = int(time.time())
        self.return_token_ids = body.get("return_token_ids") is True

    def usage(self, gen: Generation, cached: int) -> Json:
        details = {"cached_tokens": cached} if self.config.enable_prompt_tokens_details else None
        return {
            "prompt_tokens": len(self.prompt),
            "total_tokens": len(self.prompt) + gen.output_tokens,
            "completion_tokens": gen.output_tokens,
            "prompt_tokens_details": details,
        }

    def _tool_calls(self, gen: Generation) -> list[Json]:
        calls: list[Json] = []
        for gp in gen.parts:
            if gp.part.kind != "call":
                continue
            call_id = gp.call.call_id if gp.call is not None and gp.call.call_id else None
            calls.append(
                {
                    "id": call_id or new_id("chatcmpl-tool-"),
                    "type": "function",
                    "function": {"name": gp.part.name, "arguments": gp.part.content},
                }
            )
        return calls

    def json_body(self, gen: Generation, cached: int) -> bytes:
        text = "".join(gp.part.content for gp in gen.parts if gp.part.kind == "text")
        reasoning = "".join(gp.part.content for gp in gen.parts if gp.part.kind == "reasoning")
        message = {
            "role": "assistant",
            "content": text or None,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": self._tool_calls(gen),
            "reasoning": reasoning or None,
        }
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": _finish_reason(gen),
            "stop_reason": None,
            "token_ids": gen.token_ids if self.return_token_ids else None,
        }
        return orjson.dumps(
            {
                "id": self.completion_id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.config.model,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": self.usage(gen, cached),
                "prompt_logprobs": None,
                "prompt_token_ids": self.prompt if self.return_token_ids else None,
                "kv_transfer_params": None,
            }
        )

    def _chunk(self, choices: list[Json], **extra: Any) -> bytes:
        return sse_data(
            {
                "id": self.completion_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.config.model,
                "choices": choices,
                **extra,
            }
        )

    def _delta(self, delta: Json, finish_reason: str | None = None) -> bytes:
        choice: Json = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        if finish_reason is not None:
            choice["stop_reason"] = None
        return self._chunk([choice])

    def stream_plan(self, gen: Generation, cached: int) -> StreamPlan:
        per = self.config.tokens_per_delta
        frames = [self._delta({"role": "assistant", "content": ""})]
        tool_calls = iter(self._tool_calls(gen))
        call_index = 0
        for gp in gen.parts:
            pieces = tokenizer.split(gp.part.content)
            if gp.part.kind == "reasoning":
                frames += [self._delta({"reasoning": d}) for d in chunk_text(pieces, per)]
            elif gp.part.kind == "text":
                frames += [self._delta({"content": d}) for d in chunk_text(pieces, per)]
            else:
                call = next(tool_calls)
                head = {
                    **call,
                    "index": call_index,
                    "function": {**call["function"], "arguments": ""},
                }
                frames.append(self._delta({"tool_calls": [head]}))
                frames += [
                    self._delta(
                        {"tool_calls": [{"index": call_index, "function": {"arguments": d}}]}
                    )
                    for d in chunk_text(pieces, per)
                ]
                call_index += 1
        terminal_index = len(frames)
        frames.append(self._delta({}, _finish_reason(gen)))
        options = self.body.get("stream_options")
        if isinstance(options, Mapping) and options.get("include_usage"):
            frames.append(self._chunk([], usage=self.usage(gen, cached)))
        frames.append(sse_data("[DONE]"))
        return StreamPlan(frames, terminal_index, _error_frames)


def _error_frames(seq: int, message: str, code: str) -> list[bytes]:
    # vLLM's chat stream reports an engine error as a data frame holding its error
    # body, then still ends with [DONE].
    del seq, code
    return [sse_data(error_body(message, "InternalServerError", 500)), sse_data("[DONE]")]
