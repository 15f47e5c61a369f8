"""Typed views for assertions. What the official SDK returns is unions (an output item, a
stream event) and optionals (usage), as are the simulator's records (filled in once a
request is answered), where a test knows the shape. Each helper checks that shape (an
assertion of its own) and hands mypy the narrowed type."""

from __future__ import annotations

from typing import Any, TypeVar

from openai.types.responses import (
    Response,
    ResponseInputMessageItem,
    ResponseInputText,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)

from tests.upstream_sim import RecordedRequest

T = TypeVar("T")


def narrow(value: object, kind: type[T]) -> T:
    """``value``, which must be a ``kind``."""
    assert isinstance(value, kind), f"expected {kind.__name__}, got {type(value).__name__}"
    return value


def usage_of(response: Response) -> ResponseUsage:
    """The usage of a finished turn (present on every completed or incomplete one)."""
    assert response.usage is not None, f"{response.id} has no usage"
    return response.usage


def cached_tokens(response: Response) -> int:
    return usage_of(response).input_tokens_details.cached_tokens


def served_cached_tokens(call: RecordedRequest) -> int:
    """The prompt tokens the simulator served from its prefix cache for an answered call."""
    assert call.cached_tokens is not None, f"request {call.index} was not answered"
    return call.cached_tokens


def unchecked(value: object) -> Any:
    """A request part that the SDK's types refuse: sent on purpose, because the test is
    about how the server treats it (bad input, or a field the SDK's types lack)."""
    return value


def message_text(item: object) -> str:
    """The text of a message item's first content part (an input or an output message)."""
    if isinstance(item, ResponseInputMessageItem):
        return narrow(item.content[0], ResponseInputText).text
    message = narrow(item, ResponseOutputMessage)
    return narrow(message.content[0], ResponseOutputText).text
