"""``POST /v1/responses`` as vLLM 0.32 answers it (stateless: ``store`` is ignored).

Shapes follow vLLM's ``ResponsesResponse.from_request``: it echoes request fields
(``instructions``, ``tools``, ``tool_choice``, ``metadata``, ``reasoning``, ``text`` …)
but omits several fields a strict OpenAI client expects (``error``, ``completed_at``,
``store``, ``conversation``, ``prompt_cache_key`` …): the server in front must fill them.
"""

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
    check_vllm_xargs,
    chunk_text,
    new_id,
    optional_bool,
    optional_int,
    sse_event,
)
from .errors import SimHTTPError, schema_error
from .exchange import Exchange, Runtime, StreamPlan, open_exchange
from .generation import Generation, GenPart, default_reply, forced_call
from .render import render_responses
from .state import RecordedRequest, SimConfig
from .unsupported_items import check_renderable

Json = dict[str, Any]


def _validate(body: Mapping[str, Any], config: SimConfig) -> str | None:
    request_input = body.get("input")
    if not isinstance(request_input, str | list):
        raise schema_error("input: Field required" if request_input is None else "input: invalid")
    salt = cache_salt_shape(body)
    optional_int(body, "max_output_tokens", 1)
    optional_bool(body, "stream")
    check_vllm_xargs(body)
    check_model(body, config)
    if body.get("background"):
        raise SimHTTPError(
            400,
            "This vLLM engine does not support `store=True` and therefore does not support "
            "the background mode.",
            "invalid_request_error",
            "background",
        )
    previous = body.get("previous_response_id")
    if previous is not None:
        # The store is off (vLLM's default), so no id is ever known.
        raise SimHTTPError(
            404,
            f"Response with id '{previous}' not found.",
            "invalid_request_error",
            "response_id",
        )
    check_cache_salt(salt)
    check_renderable(request_input)
    if isinstance(request_input, list):
        _check_reasoning(request_input)
    return salt


def _check_reasoning(items: list[Any]) -> None:
    """vLLM 0.32 refuses a reasoning item with any ``encrypted_content`` (a non-empty
    string), as recorded in tests/fixtures/vllm/errors.json."""
    for item in items:
        if (
            isinstance(item, dict)
            and item.get("type") == "reasoning"
            and item.get("encrypted_content")
        ):
            raise SimHTTPError(
                400, "Encrypted content is not supported. (parameter=input)", param="input"
            )


def prepare(
    body: Json, rec: RecordedRequest, runtime: Runtime, next_behavior: Callable[[], Behavior | None]
) -> Exchange:
    state = runtime.state
    config = state.config
    salt = _validate(body, config)
    rendered = render_responses(body, drop_tool_calls=config.template_drops_tool_calls)
    prompt = tokenizer.tokenize(rendered.text)
    if len(prompt) >= config.max_model_len:
        raise SimHTTPError(
            400,
            f"The engine prompt length {len(prompt)} exceeds the max_model_len "
            f"{config.max_model_len}. Please reduce prompt.",
            "invalid_request_error",
            "input",
        )
    room = config.max_model_len - len(prompt)
    requested = body.get("max_output_tokens")
    max_tokens = min(requested, room) if isinstance(requested, int) else room

    behavior = next_behavior() or forced_call(body) or default_reply(rendered, config)
    request_id = body.get("request_id")
    response_id = request_id if isinstance(request_id, str) and request_id else new_id("resp_")
    shaper = _Shaper(body, config, response_id, len(prompt), max_tokens)
    exchange = open_exchange(
        runtime,
        rec,
        body,
        behavior=behavior,
        rendered=rendered,
        prompt=prompt,
        salt=salt,
        max_tokens=max_tokens,
        response_id=response_id,
        shaper=shaper,
    )
    # Nothing is rendered before the exchange plays, so the shaper may still learn this.
    report = getattr(exchange.content, "report_tokens", "exact")
    asked = body.get("enable_response_messages") is True and config.response_messages
    if asked and report != "omit":
        shaper.prompt_messages = (rendered.text, prompt)
        shaper.short_output = report == "short"
    return exchange


class _Shaper:
    """Builds the response object and its stream events for one request."""

    def __init__(
        self, body: Json, config: SimConfig, response_id: str, prompt_len: int, max_tokens: int
    ) -> None:
        self.body = body
        self.config = config
        self.response_id = response_id
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.created_at = int(time.time())
        # With ``enable_response_messages``: the prompt text and ids the engine prefilled.
        self.prompt_messages: tuple[str, list[int]] | None = None
        self.short_output = False

    # --- objects ----------------------------------------------------------------------

    def response(self, status: str, output: list[Json], usage: Json | None) -> Json:
        body = self.body
        temperature = body.get("temperature")
        top_p = body.get("top_p")
        return {
            "id": self.response_id,
            "created_at": self.created_at,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if status == "incomplete" else None
            ),
            "instructions": body.get("instructions"),
            "metadata": body.get("metadata"),
            "model": self.config.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": self.config.default_temperature if temperature is None else temperature,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": self.config.default_top_p if top_p is None else top_p,
            "background": False,
            "max_output_tokens": self.max_tokens,
            "max_tool_calls": body.get("max_tool_calls"),
            "previous_response_id": None,
            "prompt": None,
            "reasoning": body.get("reasoning"),
            "service_tier": body.get("service_tier") or "auto",
            "status": status,
            "text": body.get("text"),
            "top_logprobs": None,
            "truncation": body.get("truncation") or "disabled",
            "usage": usage,
            "user": body.get("user"),
            "input_messages": None,
            "output_messages": None,
        }

    def usage(self, gen: Generation, cached: int) -> Json:
        out = gen.output_tokens
        details: Json = {
            "cached_tokens": cached,
            "input_tokens_per_turn": [self.prompt_len],
            "cached_tokens_per_turn": [cached],
        }
        report = self.config.cache_write_report
        if report == "full_blocks":
            # vLLM 0.32 reports the prompt's full blocks it had to store (not the
            # partial last block, not what was cached already).
            details["cache_write_tokens"] = max(
                self.prompt_len // self.config.block_size * self.config.block_size - cached, 0
            )
        elif report == "uncached":
            details["cache_write_tokens"] = self.prompt_len - cached
        return {
            "input_tokens": self.prompt_len,
            "input_tokens_details": details,
            "output_tokens": out,
            "output_tokens_details": {
                "reasoning_tokens": gen.reasoning_tokens,
                "tool_output_tokens": 0,
                "output_tokens_per_turn": [out],
                "tool_output_tokens_per_turn": [0],
            },
            "total_tokens": self.prompt_len + out,
        }

    def items(self, gen: Generation) -> list[Json]:
        return [_item(gp) for gp in gen.parts]

    def final(self, gen: Generation, cached: int, items: list[Json]) -> Json:
        status = "incomplete" if gen.truncated else "completed"
        final = self.response(status, items, self.usage(gen, cached))
        if self.prompt_messages is not None:
            # vLLM's SimpleContext: one raw message for the prompt, one for the output;
            # "tokens is the source of truth" (the text leaves special tokens out).
            text, ids = self.prompt_messages
            final["input_messages"] = [_raw_message(text, ids)]
            generated = "".join(p for p in gen.pieces if p not in tokenizer.SPECIAL_TOKENS)
            ids = gen.token_ids[:-1] if self.short_output else gen.token_ids
            final["output_messages"] = [_raw_message(generated, ids)] if gen.pieces else []
        return final

    # --- renderers used by the Exchange -------------------------------------------------

    def json_body(self, gen: Generation, cached: int) -> bytes:
        return orjson.dumps(self.final(gen, cached, self.items(gen)))

    def stream_plan(self, gen: Generation, cached: int) -> StreamPlan:
        items = self.items(gen)
        snapshot = self.response("in_progress", [], None)
        events: list[Json] = [
            {"type": "response.created", "response": snapshot},
            {"type": "response.in_progress", "response": snapshot},
        ]
        for index, item in enumerate(items):
            events.extend(_item_events(index, item, self.config.tokens_per_delta))
        final = self.final(gen, cached, items)
        terminal = "response.completed"
        if gen.truncated:
            terminal = self.config.incomplete_event
        events.append({"type": terminal, "response": final})
        frames = [sse_event({**e, "sequence_number": seq}) for seq, e in enumerate(events)]
        return StreamPlan(frames, len(frames) - 1, _error_frames)


def _raw_message(text: str, ids: list[int]) -> Json:
    return {"message": text, "tokens": list(ids), "type": "raw_message_tokens"}


def render_request(body: Json, config: SimConfig) -> Json:
    """``POST /v1/responses/render`` (vLLM with ``--enable-scale-out``): the token ids the
    engine would prefill for this body, nothing generated. Stateless only."""
    if not config.enable_scale_out:
        raise SimHTTPError(
            403,
            "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out "
            "to enable them.",
            "PermissionDeniedError",
            None,
        )
    if body.get("previous_response_id") is not None:
        raise SimHTTPError(
            400,
            "previous_response_id is not supported by the stateless render endpoint.",
            "invalid_request_error",
            "previous_response_id",
        )
    request_input = body.get("input")
    if not isinstance(request_input, str | list):
        raise schema_error("input: Field required" if request_input is None else "input: invalid")
    check_model(body, config)
    check_cache_salt(cache_salt_shape(body))
    rendered = render_responses(body, drop_tool_calls=config.template_drops_tool_calls)
    prompt = tokenizer.tokenize(rendered.text)
    return {
        "request_id": new_id("resp_"),
        "token_ids": prompt,
        "model": body.get("model") or config.model,
        "cache_salt": body.get("cache_salt"),
        "stream": bool(body.get("stream")),
    }


def _error_frames(seq: int, message: str, code: str) -> list[bytes]:
    return [
        sse_event(
            {
                "type": "error",
                "code": code,
                "message": message,
                "param": None,
                "sequence_number": seq,
            }
        )
    ]


def _item(gp: GenPart) -> Json:
    part = gp.part
    if part.kind == "reasoning":
        return {
            "id": new_id("rs_"),
            "summary": [],
            "type": "reasoning",
            "content": [{"text": part.content, "type": "reasoning_text"}],
            "encrypted_content": None,
            "status": None,
        }
    if part.kind == "text":
        content: list[Json] = (
            [{"annotations": [], "text": part.content, "type": "output_text", "logprobs": None}]
            if part.content
            else []
        )
        return {
            "id": new_id("msg_"),
            "content": content,
            "role": "assistant",
            "status": "completed",
            "type": "message",
        }
    call_id = gp.call.call_id if gp.call is not None and gp.call.call_id else new_id("call_")
    return {
        "arguments": part.content,
        "call_id": call_id,
        "name": part.name,
        "type": "function_call",
        "id": new_id("fc_"),
        "status": "completed",
    }


def _deltas(text: str, per_delta: int) -> list[str]:
    return chunk_text(tokenizer.split(text), per_delta)


def _item_events(index: int, item: Json, per_delta: int) -> list[Json]:
    item_id = item["id"]
    where = {"item_id": item_id, "output_index": index}
    done = {"type": "response.output_item.done", "output_index": index, "item": item}
    if item["type"] == "function_call":
        args = item["arguments"]
        added_item = {**item, "arguments": "", "status": "in_progress"}
        return [
            {"type": "response.output_item.added", "output_index": index, "item": added_item},
            *(
                {"type": "response.function_call_arguments.delta", **where, "delta": d}
                for d in _deltas(args, per_delta)
            ),
            {
                "type": "response.function_call_arguments.done",
                **where,
                "arguments": args,
                "name": item["name"],
            },
            done,
        ]
    if item["type"] == "reasoning":
        text = item["content"][0]["text"]
        added_item = {**item, "content": None, "status": "in_progress"}
        part = {"type": "reasoning_text", "text": ""}
        where_part = {**where, "content_index": 0}
        return [
            {"type": "response.output_item.added", "output_index": index, "item": added_item},
            {"type": "response.content_part.added", **where_part, "part": part},
            *(
                {"type": "response.reasoning_text.delta", **where_part, "delta": d}
                for d in _deltas(text, per_delta)
            ),
            {"type": "response.reasoning_text.done", **where_part, "text": text},
            {
                "type": "response.content_part.done",
                **where_part,
                "part": {"type": "reasoning_text", "text": text},
            },
            done,
        ]
    added_item = {**item, "content": [], "status": "in_progress"}
    added = {"type": "response.output_item.added", "output_index": index, "item": added_item}
    if not item["content"]:
        return [added, done]
    text = item["content"][0]["text"]
    where_part = {**where, "content_index": 0}
    empty_part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    return [
        added,
        {"type": "response.content_part.added", **where_part, "part": empty_part},
        *(
            {"type": "response.output_text.delta", **where_part, "delta": d, "logprobs": []}
            for d in _deltas(text, per_delta)
        ),
        {"type": "response.output_text.done", **where_part, "text": text, "logprobs": []},
        {
            "type": "response.content_part.done",
            **where_part,
            # As vLLM 0.32 sends it: the finished part's logprobs are null.
            "part": {**empty_part, "text": text, "logprobs": None},
        },
        done,
    ]
