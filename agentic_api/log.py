"""Structured logging: JSON lines (or console), with the request id bound per request."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

# Keys whose values must never reach a log line, wherever they appear in an event.
_SECRET_KEYS = frozenset(
    {"authorization", "api_key", "key", "secret", "server_secret", "cache_salt", "headers"}
)


def _redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if key.lower() in _SECRET_KEYS:
            event[key] = "[redacted]"
    return event


def _json_line(event: Any, **_options: Any) -> bytes:
    # default=str: a value orjson cannot encode is logged as its text, never dropped.
    return orjson.dumps(event, default=str)


def configure_logging(fmt: str = "json", level: str = "info") -> None:
    numeric = logging.getLevelName(level.upper())
    # JSON lines through orjson, written as bytes: the access log runs on every request.
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json_line)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    factory: Any = (
        structlog.BytesLoggerFactory(sys.stderr.buffer)
        if fmt == "json"
        else structlog.PrintLoggerFactory(sys.stderr)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(name)s %(message)s")
    # Our own access log carries the request id; uvicorn's would duplicate it without.
    logging.getLogger("uvicorn.access").disabled = True
    # One line per upstream call would double the log volume and say less than ours.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The MCP SDK's HTTP client and session log requests and (at debug) whole messages,
    # tool arguments and outputs included: none of that belongs in our logs.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("mcp").setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
