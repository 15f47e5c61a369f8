"""Maps upstream failures onto our error type: the client sees one OpenAI error shape."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from agentic_api.errors import ApiError, UpstreamError


class UpstreamInterrupted(UpstreamError):
    """The request reached the upstream, and the answer was lost (not a refusal)."""


class UpstreamInvalidAnswer(UpstreamInterrupted):
    """The request reached the upstream, and what came back is not a response: the model
    ran, so the turn is a stored failure (never a checkpoint), not a plain refusal."""

    code = "upstream_invalid_response"


# Failures that happen before a byte of the request can have reached the upstream.
_BEFORE_SENDING = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


def from_transport(
    exc: aiohttp.ClientError | TimeoutError, base_url: str, *, sent: bool = False
) -> UpstreamError:
    """``sent``: the request was handed to the upstream, so a failure now means the answer
    was lost rather than that the request never arrived."""
    if sent and not isinstance(exc, _BEFORE_SENDING):
        if isinstance(exc, TimeoutError):
            return UpstreamInterrupted(
                f"The model server at {base_url} did not answer in time.",
                status_code=504,
                code="upstream_timeout",
            )
        return UpstreamInterrupted(
            "The model server's answer ended before the response was complete "
            f"(connection lost: {type(exc).__name__}).",
            code="upstream_stream_interrupted",
        )
    if isinstance(exc, TimeoutError):
        return UpstreamError(
            f"The model server at {base_url} did not answer in time ({type(exc).__name__}).",
            status_code=504,
            code="upstream_timeout",
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamError(
            f"The model server at {base_url} could not be reached.",
            status_code=502,
            code="upstream_unreachable",
        )
    return UpstreamError(
        f"The connection to the model server failed: {type(exc).__name__}.",
        status_code=502,
        code="upstream_connection_error",
    )


# The upstream refused the credentials this gateway sends it (AGENTIC_UPSTREAM_API_KEY),
# not the tenant's: kept as 401/403 the client's SDK would report the tenant's key as bad.
_REFUSED_OUR_CREDENTIALS = {401: "401 Unauthorized", 403: "403 Forbidden"}


def from_status(status: int, body: bytes) -> ApiError:
    """4xx answers keep their status (the request was bad), except a refusal of our own
    upstream credentials; those and 5xx become our 502."""
    message, param, code = _describe(body)
    refusal = _REFUSED_OUR_CREDENTIALS.get(status)
    if refusal is not None:
        return UpstreamError(
            f"The model server refused this gateway's upstream credentials (HTTP {refusal}"
            + (f": {message}" if message else "")
            + "); the gateway's operator must fix its upstream API key. Your own API key "
            "was accepted.",
            status_code=502,
            code="upstream_authentication_failed",
        )
    if status == 404 and param == "model":
        # vLLM names no code ("code": 404), and OpenAI's clients branch on this one.
        return ApiError(
            message or "The model server does not serve the requested model.",
            status_code=404,
            error_type="invalid_request_error",
            param="model",
            code="model_not_found",
        )
    if status == 400 and message is not None and _is_context_overflow(message):
        # OpenAI's code for a prompt past the model's window, which clients (the Agents
        # SDK, Codex) branch on; vLLM says it only in words.
        return ApiError(
            message,
            status_code=400,
            error_type="invalid_request_error",
            param="input",
            code="context_length_exceeded",
        )
    if 400 <= status < 500:
        return ApiError(
            message or f"The model server rejected the request (HTTP {status}).",
            status_code=status,
            error_type="invalid_request_error",
            param=param,
            code=code if isinstance(code, str) else "upstream_rejected",
        )
    return UpstreamError(
        f"The model server failed (HTTP {status})" + (f": {message}" if message else "."),
        status_code=502,
        code="upstream_error",
    )


# vLLM's wordings for a prompt longer than --max-model-len: Chat and Messages ("This
# model's maximum context length is N tokens…"), Responses ("The engine prompt length N
# exceeds the max_model_len M…") and the V1 engine's input check ("The decoder prompt
# (length N) is longer than the maximum model length of M…").
_CONTEXT_OVERFLOW = (
    "maximum context length",
    "exceeds the max_model_len",
    "is longer than the maximum model length",
)


def _is_context_overflow(message: str) -> bool:
    lowered = message.lower()
    return any(wording in lowered for wording in _CONTEXT_OVERFLOW)


def _describe(body: bytes) -> tuple[str | None, str | None, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return (text[:500] or None), None, None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        param = error.get("param")
        return (
            str(error.get("message") or "") or None,
            param if isinstance(param, str) else None,
            error.get("code"),
        )
    if isinstance(parsed, dict) and "message" in parsed:
        return str(parsed["message"]), None, None
    return None, None, None
