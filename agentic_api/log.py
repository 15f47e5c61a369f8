"""Structured logging: JSON lines (or console), with the request id bound per request."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import orjson
import structlog
import websockets

# Keys whose values must never reach a log line, wherever they appear in an event.
_SECRET_KEYS = frozenset(
    {"authorization", "api_key", "key", "secret", "server_secret", "cache_salt", "headers"}
)


# Credentials in free text: bearer tokens, our key format, header-style assignments.
_SECRET_TEXT = re.compile(
    r"(?i)(?P<bearer>\bbearer\s+)[^\s'\",;]+"
    r"|sk-agentic-[A-Za-z0-9_-]+"
    r"|(?P<header>\b(?:authorization|x-api-key|api[-_]key)['\"]?\s*[:=]\s*['\"]?)[^\s'\",;]+"
)
# The websockets library (uvicorn's WebSocket protocol) logs every handshake header, the
# client's Authorization included, and every frame, which carries request bodies and MCP
# credentials, at debug level. None of it is ours to log.
_WEBSOCKETS_DIR = str(Path(websockets.__file__).parent)
_WIRE_DETAIL = "websocket protocol detail not logged (it carries headers and frames)"


def redact_text(text: str) -> str:
    return _SECRET_TEXT.sub(
        lambda m: (m.group("bearer") or m.group("header") or "") + "[redacted]", text
    )


def _redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if key.lower() in _SECRET_KEYS:
            event[key] = "[redacted]"
        elif isinstance(value, str):
            event[key] = redact_text(value)
    return event


def _redacting_records(base: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """A record factory: every standard-library record, whichever library made it and
    whichever handlers (ours, uvicorn's) will write it, is cleaned as it is made."""

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        if record.levelno < logging.INFO and record.pathname.startswith(_WEBSOCKETS_DIR):
            record.msg, record.args = _WIRE_DETAIL, None
            return record
        try:
            message = record.getMessage()
        except Exception:  # a malformed call; logging reports it when the record is written
            return record
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return record

    make.redacts = True  # type: ignore[attr-defined]
    return make


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
    factory_now = logging.getLogRecordFactory()
    if not getattr(factory_now, "redacts", False):
        logging.setLogRecordFactory(_redacting_records(factory_now))
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
