"""The ``include`` query parameter of the reading routes (retrieve a response, list its
input items, conversation items): each value one OpenAI defines and this server honours
(``wire/create_fields.py``'s ``INCLUDABLE``), refused by position otherwise. The SDK sends
``include[]=…``; ``include=…`` is read too, so a hand-written query is checked the same."""

from __future__ import annotations

from fastapi import Request

from agentic_api.errors import InvalidRequest
from agentic_api.wire.create_fields import check_include
from agentic_api.wire.limits import MAX_INCLUDE_ENTRIES


def checked_include(request: Request) -> list[str]:
    values = [*request.query_params.getlist("include[]"), *request.query_params.getlist("include")]
    if len(values) > MAX_INCLUDE_ENTRIES:
        raise InvalidRequest(
            f"'include' takes at most {MAX_INCLUDE_ENTRIES} values, got {len(values)}.",
            param="include",
            code="invalid_value",
        )
    check_include(values, param="include")
    return values
