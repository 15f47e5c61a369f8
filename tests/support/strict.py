"""Every object and event our server sends, checked the way a strict client checks it.

Two layers, both explicit:

1. the official ``openai`` package's types (``Response``, the ``ResponseStreamEvent`` and
   WebSocket ``ResponsesServerEvent`` unions, output / input / conversation items, list
   pages, ``Conversation``, ``CompactedResponse``): each object is validated against the
   class its ``type`` names, so an unknown type or a missing required field fails;
2. the stricter rules of REFERENCE.md ("Strict clients validate…") that the SDK's models
   would let pass with a default: required keys present even when null, arrays never
   null, integers where integers, numbers in every snapshot, function tools echoed with
   ``strict``, messages with ``id``/``status``/array ``content``, usage with every detail.

``tests/support/strict_wiring.py`` applies these checks to everything the suite receives
from our servers (HTTP JSON, SSE, WebSocket frames). A check that fails raises
``StrictViolation`` naming the rule, and the violation is also recorded, so a test fails
even where a client library swallows the exception (the SDK turns transport errors into
``APIConnectionError``).
"""

from __future__ import annotations

import contextlib
import re
import threading
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from openai.types.beta.beta_response import BetaResponse
from openai.types.beta.beta_response_output_item import BetaResponseOutputItem
from openai.types.beta.beta_response_stream_event import BetaResponseStreamEvent
from openai.types.beta.beta_responses_server_event import BetaResponsesServerEvent
from openai.types.conversations import Conversation, ConversationDeletedResource, Message
from openai.types.conversations.conversation_item import ConversationItem
from openai.types.model import Model
from openai.types.responses import (
    CompactedResponse,
    InputTokenCountResponse,
    Response,
    ResponseInputItem,
    ResponseOutputItem,
    ResponseStreamEvent,
)
from openai.types.responses.response_error import ResponseError
from openai.types.responses.response_item import ResponseItem
from openai.types.responses.response_usage import ResponseUsage
from openai.types.responses.responses_server_event import ResponsesServerEvent, ResponseWsError
from pydantic import BaseModel, ValidationError

# -- the vocabulary a strict client expects (REFERENCE.md) ---------------------------------

RESPONSE_STATUSES = frozenset(
    {"queued", "in_progress", "completed", "incomplete", "failed", "cancelled"}
)
TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
ITEM_STATUSES = frozenset({"in_progress", "completed", "incomplete"})
# Keys a Response object carries even when null or default ("Strict clients validate…").
RESPONSE_KEYS = (
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "model",
    "output",
    "error",
    "incomplete_details",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "max_output_tokens",
    "max_tool_calls",
    "truncation",
    "text",
    "reasoning",
    "store",
    "background",
    "service_tier",
    "metadata",
    "previous_response_id",
    "conversation",
    "prompt_cache_key",
    "safety_identifier",
    "user",
    "usage",
)
SNAPSHOT_EVENTS = {
    "response.created": frozenset({"in_progress", "queued"}),
    "response.in_progress": frozenset({"in_progress"}),
    "response.queued": frozenset({"queued"}),
}
TERMINAL_EVENTS = {f"response.{status}": status for status in TERMINAL_STATUSES}
# ``response.cancelled`` ends a cancelled background response's stream. The SDK's event
# unions have no event for the ``cancelled`` status; we check it as a terminal event
# carrying a valid Response object.
EXTENSION_EVENTS = frozenset({"response.cancelled"})


class StrictViolation(AssertionError):
    def __init__(self, rule: str, where: str, message: str) -> None:
        super().__init__(f"[{rule}] {where}: {message}")
        self.rule = rule
        self.where = where


# -- violations seen, and the one place a known gap may be tolerated -----------------------


@dataclass
class _Ledger:
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: list[StrictViolation] = field(default_factory=list)
    tolerated: dict[str, int] = field(default_factory=dict)


_ledger = _Ledger()


def fail(rule: str, where: str, message: str) -> None:
    with _ledger.lock:
        if _ledger.tolerated.get(rule):
            return
        violation = StrictViolation(rule, where, message)
        _ledger.seen.append(violation)
    raise violation


def take_violations() -> list[StrictViolation]:
    """The violations recorded since the last call (the suite fails a test that has any)."""
    with _ledger.lock:
        seen, _ledger.seen = _ledger.seen, []
    return seen


@contextlib.contextmanager
def tolerating(rule: str) -> Iterator[None]:
    """Lets exactly one named rule pass inside the block: for a known gap owned elsewhere,
    with a comment at the call site saying which change removes it."""
    with _ledger.lock:
        _ledger.tolerated[rule] = _ledger.tolerated.get(rule, 0) + 1
    try:
        yield
    finally:
        with _ledger.lock:
            _ledger.tolerated[rule] -= 1


# -- the SDK's types, by the ``type`` each class declares -----------------------------------


def _classes_by_type(union: Any) -> dict[str, list[type[BaseModel]]]:
    """The union's members by the ``type`` literal they declare (several for some:
    ``message`` is an input or an output message in an item list)."""
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    found: dict[str, list[type[BaseModel]]] = {}
    for member in typing.get_args(union):
        annotation = member.model_fields["type"].annotation
        for literal in typing.get_args(annotation):
            found.setdefault(literal, []).append(member)
    return found


STREAM_EVENTS = _classes_by_type(ResponseStreamEvent)
SOCKET_EVENTS = _classes_by_type(ResponsesServerEvent)
OUTPUT_ITEMS = _classes_by_type(ResponseOutputItem)
# What ``input_items`` lists: the SDK's listed item types, and for a type only its input
# union knows (``compaction_trigger``), that input item as the client sent it.
INPUT_ITEMS = {
    **_classes_by_type(ResponseInputItem),
    **_classes_by_type(ResponseItem),
}
CONVERSATION_ITEMS = _classes_by_type(ConversationItem)


@dataclass(frozen=True)
class Vocabulary:
    """The SDK's types a reply is checked with: the Responses API's own, or on the beta
    path (``?beta=true``: the hosted multi-agent beta) the beta's, whose items and events
    add ``multi_agent_call``, ``multi_agent_call_output``, ``agent_message``, the ``agent``
    attribution and ``response.inject.*``."""

    response: type[BaseModel]
    stream_events: dict[str, list[type[BaseModel]]]
    socket_events: dict[str, list[type[BaseModel]]]
    output_items: dict[str, list[type[BaseModel]]]


STANDARD = Vocabulary(Response, STREAM_EVENTS, SOCKET_EVENTS, OUTPUT_ITEMS)
BETA = Vocabulary(
    BetaResponse,
    _classes_by_type(BetaResponseStreamEvent),
    _classes_by_type(BetaResponsesServerEvent),
    _classes_by_type(BetaResponseOutputItem),
)


def _problems(model: type[BaseModel], value: Any) -> list[str]:
    try:
        model.model_validate(value)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return []


def sdk_validate(model: type[BaseModel], value: Any, where: str) -> None:
    problems = _problems(model, value)
    if problems:
        fail(f"sdk.{model.__name__}", where, "; ".join(problems[:5]))


def _sdk_by_type(
    classes: Mapping[str, list[type[BaseModel]]], value: Any, where: str, kind: str
) -> None:
    """Valid as one of the SDK classes its ``type`` names (the closest one is reported)."""
    if not isinstance(value, dict):
        fail(f"{kind}.object", where, f"expected an object, got {type(value).__name__}")
        return
    candidates = classes.get(value.get("type"))  # type: ignore[arg-type]
    if not candidates:
        fail(f"{kind}.type", where, f"type {value.get('type')!r} is not one the SDK knows")
        return
    attempts = [(model, _problems(model, value)) for model in candidates]
    if any(not problems for _, problems in attempts):
        return
    model, problems = min(attempts, key=lambda attempt: len(attempt[1]))
    fail(f"sdk.{model.__name__}", where, "; ".join(problems[:5]))


# -- JSON types, as a strict client sees them ------------------------------------------------


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def need(value: Mapping[str, Any], key: str, where: str, rule: str) -> Any:
    if key not in value:
        fail(rule, where, f"required key {key!r} is missing")
    return value.get(key)


def need_int(value: Mapping[str, Any], key: str, where: str, rule: str) -> None:
    if not is_int(need(value, key, where, rule)):
        fail(rule, where, f"{key!r} must be an integer, got {value.get(key)!r}")


def need_list(value: Mapping[str, Any], key: str, where: str, rule: str) -> list[Any]:
    found = need(value, key, where, rule)
    if not isinstance(found, list):
        fail(rule, where, f"{key!r} must be an array, got {found!r}")
    return found  # type: ignore[no-any-return]


# -- items ------------------------------------------------------------------------------------


def check_output_text(part: Any, where: str) -> None:
    if not isinstance(part, dict) or part.get("type") != "output_text":
        return
    if not isinstance(part.get("text"), str):
        fail("output_text.text", where, "text must be a string")
    need_list(part, "annotations", where, "output_text.annotations")
    need_list(part, "logprobs", where, "output_text.logprobs")


def check_message(item: Mapping[str, Any], where: str, *, status_required: bool = True) -> None:
    """A message item: ``id``, ``status`` and an array ``content`` (REFERENCE.md)."""
    if not isinstance(need(item, "id", where, "message.id"), str):
        fail("message.id", where, "id must be a string")
    checks_status = status_required or "status" in item
    if checks_status and need(item, "status", where, "message.status") not in ITEM_STATUSES:
        fail("message.status", where, f"status {item.get('status')!r} is not an item status")
    for index, part in enumerate(need_list(item, "content", where, "message.content")):
        check_output_text(part, f"{where}.content[{index}]")


def check_item_rules(item: Any, where: str, *, message_status: bool = True) -> None:
    """The stricter rules for items of every list (output, input items, conversations)."""
    if not isinstance(item, dict):
        fail("item.object", where, "an item must be an object")
        return
    kind = item.get("type")
    if kind == "message":
        check_message(item, where, status_required=message_status)
    elif kind in ("function_call", "function_call_output"):
        if not isinstance(need(item, "id", where, f"{kind}.id"), str):
            fail(f"{kind}.id", where, "id must be a string")
        if need(item, "status", where, f"{kind}.status") not in ITEM_STATUSES:
            fail(f"{kind}.status", where, f"status {item.get('status')!r} is not an item status")
    elif kind == "reasoning":
        need_list(item, "summary", where, "reasoning.summary")
        if item.get("content") is not None:
            need_list(item, "content", where, "reasoning.content")


def check_output_item(item: Any, where: str, vocabulary: Vocabulary = STANDARD) -> None:
    _sdk_by_type(vocabulary.output_items, item, where, "output_item")
    check_item_rules(item, where)


def check_input_item(item: Any, where: str) -> None:
    """An item of ``GET /v1/responses/{id}/input_items`` (input messages need no status in
    the SDK's type; everything else as in an output list)."""
    _sdk_by_type(INPUT_ITEMS, item, where, "input_item")
    check_item_rules(item, where, message_status=False)


def check_conversation_item(item: Any, where: str) -> None:
    _sdk_by_type(CONVERSATION_ITEMS, item, where, "conversation_item")
    check_item_rules(item, where)


# -- usage and the Response object --------------------------------------------------------


def check_usage(usage: Any, where: str) -> None:
    sdk_validate(ResponseUsage, usage, where)
    if not isinstance(usage, dict):
        return
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        need_int(usage, key, where, "usage.counts")
    inputs = need(usage, "input_tokens_details", where, "usage.input_tokens_details")
    outputs = need(usage, "output_tokens_details", where, "usage.output_tokens_details")
    if not isinstance(inputs, dict) or not isinstance(outputs, dict):
        fail("usage.details", where, "usage details must be objects")
        return
    need_int(inputs, "cached_tokens", f"{where}.input_tokens_details", "usage.cached_tokens")
    need_int(
        inputs, "cache_write_tokens", f"{where}.input_tokens_details", "usage.cache_write_tokens"
    )
    need_int(
        outputs, "reasoning_tokens", f"{where}.output_tokens_details", "usage.reasoning_tokens"
    )
    if usage["total_tokens"] != usage["input_tokens"] + usage["output_tokens"]:
        fail("usage.total", where, "total_tokens is not input_tokens + output_tokens")
    if inputs["cached_tokens"] + inputs["cache_write_tokens"] > usage["input_tokens"]:
        fail("usage.cache_write_tokens", where, "cached + cache_write exceed input_tokens")


def check_tool(tool: Any, where: str) -> None:
    if isinstance(tool, dict) and tool.get("type") == "function":
        strict = need(tool, "strict", where, "tool.function.strict")
        if strict is not None and not isinstance(strict, bool):
            fail("tool.function.strict", where, "strict must be a boolean or null")


# The codes the SDK lists for ``Response.error.code``. A failed response may carry another:
# the foreground refusal's own code (``wire/response_object.py:response_error``), as
# OpenAI's background responses do; the SDK lists but does not enforce them.
LISTED_ERROR_CODES = frozenset(typing.get_args(ResponseError.model_fields["code"].annotation))


def _with_listed_error_code(response: Any, where: str) -> Any:
    error = response.get("error") if isinstance(response, dict) else None
    if not isinstance(error, dict) or error.get("code") in LISTED_ERROR_CODES:
        return response
    code = error.get("code")
    if not isinstance(code, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", code):
        fail("response.error.code", where, f"not an error code: {code!r}")
    return {**response, "error": {**error, "code": "server_error"}}


def check_response(
    response: Any,
    where: str,
    *,
    status: frozenset[str] | None = None,
    vocabulary: Vocabulary = STANDARD,
) -> None:
    """A Response object at any stage (snapshot, final, retrieved, cancelled)."""
    sdk_validate(vocabulary.response, _with_listed_error_code(response, where), where)
    if not isinstance(response, dict):
        return
    for key in RESPONSE_KEYS:
        need(response, key, where, "response.keys")
    if response["object"] != "response":
        fail("response.object", where, "object must be 'response'")
    state = response["status"]
    if state not in RESPONSE_STATUSES:
        fail("response.status", where, f"unknown status {state!r}")
    if status is not None and state not in status:
        fail("response.status", where, f"status {state!r}, expected one of {sorted(status)}")
    need_int(response, "created_at", where, "response.created_at")
    if state == "completed":
        need_int(response, "completed_at", where, "response.completed_at")
    elif response["completed_at"] is not None:
        fail("response.completed_at", where, f"completed_at set on a {state} response")
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        if not is_number(response[key]):
            fail(f"response.{key}", where, f"{key} must be a number, got {response[key]!r}")
    need_int(response, "top_logprobs", where, "response.top_logprobs")
    for key in ("parallel_tool_calls", "store", "background"):
        if not isinstance(response[key], bool):
            fail(f"response.{key}", where, f"{key} must be a boolean, got {response[key]!r}")
    for key in ("metadata", "text", "reasoning"):
        if not isinstance(response[key], dict):
            fail(f"response.{key}", where, f"{key} must be an object, got {response[key]!r}")
    for index, tool in enumerate(need_list(response, "tools", where, "response.tools")):
        check_tool(tool, f"{where}.tools[{index}]")
    for index, item in enumerate(need_list(response, "output", where, "response.output")):
        check_output_item(item, f"{where}.output[{index}]", vocabulary)
    usage = response["usage"]
    if usage is not None:
        check_usage(usage, f"{where}.usage")
    elif state in ("completed", "incomplete"):
        fail("response.usage", where, f"a {state} response reports its usage")
    if (response["error"] is not None) != (state == "failed"):
        fail("response.error", where, f"error must be set exactly when failed (status {state})")
    if (response["incomplete_details"] is not None) != (state == "incomplete"):
        fail("response.incomplete_details", where, "set exactly when the status is incomplete")


# -- events --------------------------------------------------------------------------------


def check_event(
    event: Any, where: str, *, socket: bool = False, vocabulary: Vocabulary = STANDARD
) -> None:
    """One stream event (SSE, or a WebSocket frame with ``socket``)."""
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        fail("event.type", where, "an event is an object with a string 'type'")
        return
    kind = event["type"]
    where = f"{where} {kind}#{event.get('sequence_number')}"
    if socket and kind == "error" and "sequence_number" not in event:
        check_socket_error(event, where)
        return
    if kind in EXTENSION_EVENTS:
        if set(event) - {"type", "response", "sequence_number", "stream_id"}:
            fail("event.extension", where, f"unexpected keys {sorted(event)}")
    else:
        listed = event
        if isinstance(event.get("response"), dict):
            listed = {**event, "response": _with_listed_error_code(event["response"], where)}
        events = vocabulary.socket_events if socket else vocabulary.stream_events
        _sdk_by_type(events, listed, where, "event")
    need_int(event, "sequence_number", where, "event.sequence_number")
    if socket and "stream_id" in event and not isinstance(event["stream_id"], str):
        fail("event.stream_id", where, "stream_id must be a string")
    if kind == "error":
        for key in ("code", "message", "param"):
            need(event, key, where, "event.error")
        if socket:
            check_socket_error(event, where)
    if "response" in event:
        expected = SNAPSHOT_EVENTS.get(kind)
        if kind in TERMINAL_EVENTS:
            expected = frozenset({TERMINAL_EVENTS[kind]})
        check_response(
            event["response"], f"{where}.response", status=expected, vocabulary=vocabulary
        )
    if "item" in event:
        check_output_item(event["item"], f"{where}.item", vocabulary)
    if "part" in event:
        check_output_text(event["part"], f"{where}.part")
    if kind in ("response.output_text.delta", "response.output_text.done"):
        need_list(event, "logprobs", where, "event.logprobs")


def check_socket_error(frame: Mapping[str, Any], where: str) -> None:
    """``{"type": "error", "status", "error": {"type", "code", "message", "param"}}``."""
    sdk_validate(ResponseWsError, frame, where)
    error = need(frame, "error", where, "socket_error.error")
    if not isinstance(error, dict):
        fail("socket_error.error", where, "error must be an object")
        return
    for key in ("type", "code", "message", "param"):
        need(error, key, where, "socket_error.keys")
    if "sequence_number" not in frame:
        need_int(frame, "status", where, "socket_error.status")


def is_terminal(event: Mapping[str, Any]) -> bool:
    return event.get("type") in TERMINAL_EVENTS


class StreamCheck:
    """The rules of one event stream as a whole: sequence numbers counting up by one,
    nothing after the terminal event. ``key`` separates interleaved streams (lanes)."""

    def __init__(
        self, where: str, *, socket: bool = False, vocabulary: Vocabulary = STANDARD
    ) -> None:
        self.where = where
        self.socket = socket
        self.vocabulary = vocabulary
        self._last: dict[Any, int] = {}
        self._ended: set[Any] = set()
        self.count = 0

    def feed(self, event: Any, key: Any = None) -> None:
        where = f"{self.where} event {self.count}"
        self.count += 1
        check_event(event, where, socket=self.socket, vocabulary=self.vocabulary)
        if isinstance(event, dict) and event.get("type") == "response.inject.failed":
            # The answer to a client's inject for a response not running: outside every
            # response's stream (its sequence number is 0).
            return
        sequence = event.get("sequence_number")
        if not is_int(sequence):
            return  # a connection-level socket error, outside any response's stream
        if key in self._ended:
            if sequence == 0 and event.get("type") == "response.created":
                # The next response on the same lane.
                self._ended.discard(key)
                self._last.pop(key, None)
            else:
                fail("stream.after_terminal", where, "an event after the terminal event")
        last = self._last.get(key)
        if last is not None and sequence != last + 1:
            fail("stream.sequence", where, f"sequence {sequence} follows {last}")
        self._last[key] = sequence
        if is_terminal(event):
            self._ended.add(key)


# -- whole objects, by what the route returns ------------------------------------------------


def check_error_body(body: Any, where: str) -> None:
    """``{"error": {"message", "type", "param", "code"}}`` and nothing else."""
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        fail("error.shape", where, f"not an OpenAI error body: {body!r}"[:300])
        return
    error = body["error"]
    for key in ("message", "type", "param", "code"):
        need(error, key, where, "error.keys")
    if not isinstance(error["message"], str) or not isinstance(error["type"], str):
        fail("error.types", where, "message and type must be strings")


def check_list(
    page: Any, where: str, check_item: typing.Callable[[Any, str], None], *, id_key: str = "id"
) -> None:
    """A cursor page: ``first_id``/``last_id`` name the first and last item; on an empty
    page they are null (the SDK types them ``str``; OpenAI sends null, and so do we)."""
    if not isinstance(page, dict):
        fail("list.object", where, "a list page is an object")
        return
    if need(page, "object", where, "list.keys") != "list":
        fail("list.object", where, "object must be 'list'")
    data = need_list(page, "data", where, "list.data")
    if not isinstance(need(page, "has_more", where, "list.keys"), bool):
        fail("list.has_more", where, "has_more must be a boolean")
    first, last = (
        need(page, "first_id", where, "list.keys"),
        need(page, "last_id", where, "list.keys"),
    )
    if data:
        ids = [item.get(id_key) if isinstance(item, dict) else None for item in data]
        if first != ids[0] or last != ids[-1]:
            fail("list.cursors", where, f"first_id/last_id {first!r}/{last!r} for ids {ids}")
    elif first is not None or last is not None:
        fail("list.cursors", where, "an empty page has null first_id and last_id")
    for index, item in enumerate(data):
        check_item(item, f"{where}.data[{index}]")


def check_compacted(body: Any, where: str) -> None:
    """``response.compaction``: the kept messages, then one compaction item. The SDK types
    ``output`` as output items, whose only message is the assistant's, although the kept
    messages are the user's (as OpenAI documents and sends): those are checked as the
    SDK's any-role ``Message`` (id, status and array content required)."""
    if not isinstance(body, dict):
        fail("compaction.object", where, "a compaction is an object")
        return
    output = need_list(body, "output", where, "compaction.output")
    others = [item for item in output if not _is_message(item)]
    sdk_validate(CompactedResponse, {**body, "output": others}, where)
    check_usage(body.get("usage"), f"{where}.usage")
    for index, item in enumerate(output):
        at = f"{where}.output[{index}]"
        if _is_message(item):
            sdk_validate(Message, item, at)
            check_item_rules(item, at)
        else:
            check_output_item(item, at)
    if not output or not isinstance(output[-1], dict) or output[-1].get("type") != "compaction":
        fail("compaction.output", where, "the output ends with one compaction item")


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "message"


def _check_model(item: Any, where: str) -> None:
    sdk_validate(Model, item, where)


def _check_models(body: Any, where: str) -> None:
    if not isinstance(body, dict) or body.get("object") != "list":
        fail("models.list", where, "a model list is {object: list, data: [...]}")
        return
    for index, item in enumerate(need_list(body, "data", where, "models.data")):
        _check_model(item, f"{where}.data[{index}]")


def _check_deleted_response(body: Any, where: str) -> None:
    if body != {"id": body.get("id"), "object": "response.deleted", "deleted": True}:
        fail("response.deleted", where, f"not a deletion object: {body!r}")


def _check_conversation(body: Any, where: str) -> None:
    sdk_validate(Conversation, body, where)
    if isinstance(body, dict) and not isinstance(body.get("metadata"), dict):
        fail("conversation.metadata", where, "metadata must be an object")


def _check_admin(body: Any, where: str) -> None:
    """Admin views are ours (``operator/shapes/admin.py``); they keep OpenAI's list conventions."""
    if isinstance(body, dict) and body.get("object") == "list":
        check_list(body, where, lambda item, at: None, id_key=_admin_id_key(body))


def _admin_id_key(page: Mapping[str, Any]) -> str:
    data = page.get("data") or []
    if data and isinstance(data[0], dict) and data[0].get("object") == "admin.cache_stats":
        return "model"
    return "id"


# Probes whose body is a report of their own in every status (``/ready`` answers 503
# with what is failing).
NOT_OPENAI_BODIES = frozenset({"/health", "/ready"})
# Routes of another API's shapes (Anthropic's Messages API), with tests of their own.
FOREIGN_PREFIXES = ("/v1/messages",)


def is_openai_route(path: str) -> bool:
    return path not in NOT_OPENAI_BODIES and not path.startswith(FOREIGN_PREFIXES)


_ID = r"[^/]+"
# (method, path pattern, check of a 2xx JSON body). Routes outside /v1 and /admin are not
# OpenAI objects (health, metrics, the OpenAPI document) and only their errors are checked.
JSON_ROUTES: list[tuple[str, re.Pattern[str], typing.Callable[[Any, str], None]]] = [
    (m, re.compile(f"^{p}$"), c)
    for m, p, c in [
        ("POST", "/v1/responses", check_response),
        (
            "POST",
            "/v1/responses/input_tokens",
            lambda b, w: sdk_validate(InputTokenCountResponse, b, w),
        ),
        ("POST", "/v1/responses/compact", check_compacted),
        ("GET", f"/v1/responses/{_ID}", check_response),
        ("DELETE", f"/v1/responses/{_ID}", _check_deleted_response),
        ("POST", f"/v1/responses/{_ID}/cancel", check_response),
        (
            "GET",
            f"/v1/responses/{_ID}/input_items",
            lambda b, w: check_list(b, w, check_input_item),
        ),
        ("POST", "/v1/conversations", _check_conversation),
        ("GET", f"/v1/conversations/{_ID}", _check_conversation),
        ("POST", f"/v1/conversations/{_ID}", _check_conversation),
        (
            "DELETE",
            f"/v1/conversations/{_ID}",
            lambda b, w: sdk_validate(ConversationDeletedResource, b, w),
        ),
        (
            "POST",
            f"/v1/conversations/{_ID}/items",
            lambda b, w: check_list(b, w, check_conversation_item),
        ),
        (
            "GET",
            f"/v1/conversations/{_ID}/items",
            lambda b, w: check_list(b, w, check_conversation_item),
        ),
        ("GET", f"/v1/conversations/{_ID}/items/{_ID}", check_conversation_item),
        ("DELETE", f"/v1/conversations/{_ID}/items/{_ID}", _check_conversation),
        ("GET", "/v1/models", _check_models),
        ("GET", "/v1/models/.+", _check_model),
        ("GET", "/admin/v1/.*", _check_admin),
        ("POST", "/admin/v1/.*", _check_admin),
        ("DELETE", "/admin/v1/.*", _check_admin),
    ]
]


def check_json_reply(
    method: str, path: str, status: int, data: bytes, vocabulary: Vocabulary = STANDARD
) -> None:
    """A JSON reply of our server: an OpenAI error body, or the object its route returns
    (a Response on the beta path checked with the beta's types)."""
    where = f"{method} {path} -> {status}"
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        fail("json.decode", where, f"undecodable body {data[:200]!r}")
        return
    if not is_openai_route(path):
        return
    if status >= 400:
        check_error_body(body, where)
        return
    if not (path.startswith("/v1/") or path.startswith("/admin/v1/")):
        return
    for route_method, pattern, check in JSON_ROUTES:
        if route_method == method and pattern.match(path):
            if check is check_response:
                check_response(body, where, vocabulary=vocabulary)
            else:
                check(body, where)
            return
    fail("route.unknown", where, "a JSON route strict.py does not know: add it to JSON_ROUTES")
