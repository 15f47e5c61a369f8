"""Query parameters of the console's pages, checked: a bad one is a 400 page naming it,
never a guess."""

from __future__ import annotations

from collections.abc import Collection
from typing import TypeVar

from starlette.requests import Request

from agentic_api.wire.limits import MAX_ID_LENGTH

T = TypeVar("T", bound=str)


class BadParameter(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def integer(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise BadParameter(name, f"must be a whole number from {low} to {high}")
    return int(raw)


def choice(request: Request, name: str, options: Collection[T], default: T) -> T:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    for option in options:
        if raw == option:
            return option
    raise BadParameter(name, "must be one of " + ", ".join(sorted(options)))


def text(request: Request, name: str, *, max_length: int = 200) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_length or "\0" in raw:
        raise BadParameter(name, f"must be at most {max_length} characters, without NUL")
    return raw


def identifier(request: Request, name: str) -> str | None:
    return text(request, name, max_length=MAX_ID_LENGTH)


def flag(request: Request, name: str) -> bool:
    return request.query_params.get(name) in ("1", "on", "true")
