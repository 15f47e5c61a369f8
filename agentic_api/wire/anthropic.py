"""The Anthropic Messages API at our door: request checks, the forwarded body, and
Anthropic's error shape (``{"type": "error", "error": {"type", "message"}}``).

We check what we act on, and what would otherwise fail only after a round trip to the
model server with a less clear message; everything else (sampling fields, thinking,
``cache_control`` markers, beta fields) is the model server's to judge and travels in the
client's own bytes. The only change to the body is the cache salt: the client's is
dropped, the tenant's appended (``JsonObjectText.edited``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentic_api.errors import ApiError, InvalidRequest
from agentic_api.wire.json_members import JsonObjectText, NotAJsonObject, parse_object
from agentic_api.wire.limits import MAX_MODEL_LENGTH, MAX_TOOLS
from lineage import canonical_json

MESSAGES_PATH = "/v1/messages"
VERSION_HEADER = "anthropic-version"
BETA_HEADER = "anthropic-beta"
# Claude Code names its session in this header (checked with @anthropic-ai/claude-code).
CLIENT_SESSION_HEADER = "x-claude-code-session-id"
# Anthropic's limits where they bound what we keep or hash.
MAX_MESSAGES = 100_000
MAX_USER_ID_LENGTH = 256
MAX_CLIENT_SESSION_LENGTH = 256
MAX_BETA_HEADER_LENGTH = 2048

ROLES = frozenset({"user", "assistant", "system"})
_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")

# Anthropic's error types, by HTTP status (https://docs.anthropic.com/en/api/errors).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def is_anthropic_path(path: str) -> bool:
    """Routes that answer in Anthropic's shape (errors included)."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def error_type(status: int) -> str:
    known = _ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(error: ApiError) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type(error.status_code), "message": error.message},
    }


@dataclass(frozen=True)
class MessagesRequest:
    """A checked Messages body, with its original text for forwarding."""

    document: JsonObjectText
    model: str
    stream: bool
    messages: list[dict[str, Any]]
    system: Any
    user_id: str | None

    def upstream_body(self, cache_salt: str) -> bytes:
        edited = self.document.edited(drop=("cache_salt",), append={"cache_salt": cache_salt})
        return edited.encode("utf-8")

    def session_items(self) -> list[bytes]:
        """What a content-derived session is hashed from: the system prompt and the first
        message, as canonical JSON (so spacing and key order do not matter). Only the
        first message: a one-message first turn and its continuations must agree."""
        head: list[Any] = [] if self.system in (None, "", []) else [{"system": self.system}]
        head.append(self.messages[0])
        return [canonical_json(value) for value in head]


def parse_messages_request(raw: bytes, *, counting: bool = False) -> MessagesRequest:
    """``counting``: a ``count_tokens`` body, which has no ``max_tokens`` or ``stream``."""
    try:
        document = parse_object(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidRequest("The request body is not valid UTF-8.") from None
    except NotAJsonObject as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}") from None
    body = document.values()
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model", "Field required" if model is None else "must be a string")
    if len(model) > MAX_MODEL_LENGTH:
        raise _invalid("model", f"at most {MAX_MODEL_LENGTH} characters")
    if not counting:
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            raise _invalid("max_tokens", "Field required")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise _invalid("max_tokens", "must be a positive integer")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _invalid("stream", "must be a boolean")
    messages = _messages(body.get("messages"))
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _blocks(system, "system")
    _tools(body.get("tools"))
    return MessagesRequest(
        document=document,
        model=model,
        stream=bool(stream) and not counting,
        messages=messages,
        system=system,
        user_id=_user_id(body.get("metadata")),
    )


def check_version(value: str | None) -> str:
    """The ``anthropic-version`` header, which Anthropic's API requires."""
    if value is None or not value.strip():
        raise InvalidRequest(f"{VERSION_HEADER}: header is required")
    if _VERSION.fullmatch(value.strip()) is None:
        raise InvalidRequest(f"{VERSION_HEADER}: {value!r} is not a version (YYYY-MM-DD)")
    return value.strip()


def check_beta(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_BETA_HEADER_LENGTH:
        raise InvalidRequest(f"{BETA_HEADER}: at most {MAX_BETA_HEADER_LENGTH} characters")
    return value


def client_session(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_CLIENT_SESSION_LENGTH:
        raise InvalidRequest(
            f"{CLIENT_SESSION_HEADER}: at most {MAX_CLIENT_SESSION_LENGTH} characters"
        )
    return value or None


def _invalid(param: str, problem: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {problem}", param=param)


def _messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise _invalid("messages", "Field required")
    if not isinstance(value, list):
        raise _invalid("messages", "must be a list")
    if not value:
        raise _invalid("messages", "at least one message is required")
    if len(value) > MAX_MESSAGES:
        raise _invalid("messages", f"at most {MAX_MESSAGES} messages")
    for index, message in enumerate(value):
        where = f"messages.{index}"
        if not isinstance(message, Mapping):
            raise _invalid(where, "must be an object")
        role = message.get("role")
        if role not in ROLES:
            raise _invalid(f"{where}.role", "must be 'user' or 'assistant'")
        content = message.get("content")
        if content is None:
            raise _invalid(f"{where}.content", "Field required")
        if not isinstance(content, str):
            _blocks(content, f"{where}.content")
    return value


def _blocks(value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise _invalid(where, "must be a string or a list of content blocks")
    for index, block in enumerate(value):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _invalid(f"{where}.{index}", "must be a content block with a 'type'")


def _tools(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        raise _invalid("tools", "must be a list")
    if len(value) > MAX_TOOLS:
        raise _invalid("tools", f"at most {MAX_TOOLS} tools")
    for index, tool in enumerate(value):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise _invalid(f"tools.{index}", "must be an object with a 'name'")


def _user_id(metadata: Any) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise _invalid("metadata", "must be an object")
    user_id = metadata.get("user_id")
    if user_id is None:
        return None
    if not isinstance(user_id, str):
        raise _invalid("metadata.user_id", "must be a string")
    if len(user_id) > MAX_USER_ID_LENGTH:
        raise _invalid("metadata.user_id", f"at most {MAX_USER_ID_LENGTH} characters")
    return user_id or None


def forwarded_headers(version: str, beta: str | None) -> dict[str, str]:
    """The client's Anthropic headers the model server gets as they were."""
    headers = {VERSION_HEADER: version}
    if beta:
        headers[BETA_HEADER] = beta
    return headers
