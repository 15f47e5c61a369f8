"""Request validation and wire helpers shared by the Responses and Chat endpoints."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from .errors import SimHTTPError, schema_error
from .state import SimConfig

CACHE_SALT_MAX_CHARS = 128
_CACHE_SALT_FORBIDDEN = ("@", "/", "\\", "\x00")


def new_id(prefix: str) -> str:
    """vLLM's ids: a prefix and a random uuid4 in hex (32 characters)."""
    return prefix + uuid.uuid4().hex


def parse_json_object(body: bytes, content_type: str | None) -> dict[str, Any]:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise schema_error("Unsupported Media Type: Only 'application/json' is allowed")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise schema_error(f"JSON decode error: {exc}") from None
    if not isinstance(parsed, dict):
        raise schema_error("Input should be a valid dictionary or object to extract fields from")
    return parsed


def check_model(body: Mapping[str, Any], config: SimConfig) -> None:
    model = body.get("model")
    # vLLM serves its one model when the field is absent or empty.
    if model is None or model == "" or model == config.model:
        return
    raise SimHTTPError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def cache_salt_shape(body: Mapping[str, Any]) -> str | None:
    """Schema-level check (pydantic validator in vLLM): a non-empty string if present."""
    salt = body.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        raise schema_error(
            "Value error, Parameter 'cache_salt' must be a non-empty string if provided."
        )
    return salt


def check_cache_salt(salt: str | None) -> None:
    """The engine-level limits on the salt (checked after the model, as vLLM does)."""
    if salt is None:
        return
    if len(salt) > CACHE_SALT_MAX_CHARS:
        raise SimHTTPError(
            400,
            f"cache_salt must be at most {CACHE_SALT_MAX_CHARS} characters, got {len(salt)}.",
            param="cache_salt",
        )
    bad = [c for c in _CACHE_SALT_FORBIDDEN if c in salt]
    if bad:
        raise SimHTTPError(
            400,
            f"cache_salt contains forbidden characters {bad!r}.",
            param="cache_salt",
        )


def check_vllm_xargs(body: Mapping[str, Any]) -> None:
    """vLLM types ``vllm_xargs`` as ``dict[str, str | int | float | list[str | int | float]]``:
    a nested object (say, a router hint sent as an object, not a JSON string) is a 400."""
    xargs = body.get("vllm_xargs")
    if xargs is None:
        return
    if not isinstance(xargs, dict):
        raise schema_error("vllm_xargs: Input should be a valid dictionary")
    scalar = (str, int, float)
    for key, value in xargs.items():
        ok = isinstance(value, scalar) or (
            isinstance(value, list) and all(isinstance(v, scalar) for v in value)
        )
        if not ok:
            raise schema_error(f"vllm_xargs.{key}: Input should be a valid string")


def output_too_large(requested: int, limit: int, prompt_tokens: int) -> str:
    """vLLM's words (chat completions and Messages alike) when the prompt leaves no room
    for the asked output."""
    return (
        f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's "
        f"maximum context length is {limit} tokens and your request has {prompt_tokens} "
        f"input tokens ({requested} > {limit} - {prompt_tokens})."
    )


def optional_int(body: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise schema_error(f"{name}: Input should be a valid integer")
    if value < minimum:
        raise SimHTTPError(400, f"{name} must be at least {minimum}, got {value}.", param=name)
    return value


def optional_bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise schema_error(f"{name}: Input should be a valid boolean")
    return value


def sse_event(payload: Mapping[str, Any]) -> bytes:
    """A Responses-API frame: ``event: <type>`` plus the JSON data."""
    return (
        b"event: " + str(payload["type"]).encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
    )


def sse_data(payload: Mapping[str, Any] | str) -> bytes:
    """A Chat-Completions frame: data only (``[DONE]`` is sent as a bare string)."""
    data = payload.encode() if isinstance(payload, str) else orjson.dumps(payload)
    return b"data: " + data + b"\n\n"


def chunk_text(pieces: list[str], per_delta: int) -> list[str]:
    """Group token pieces into delta strings (no deltas for empty text)."""
    step = max(1, per_delta)
    return ["".join(pieces[i : i + step]) for i in range(0, len(pieces), step)]
