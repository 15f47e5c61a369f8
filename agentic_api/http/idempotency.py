"""The ``Idempotency-Key`` header: read and checked here, acted on in ``idempotency.py``
(through ``serving/``), and a replayed outcome rendered."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agentic_api.errors import InvalidRequest
from agentic_api.http.json_response import JsonResponse
from agentic_api.http.sse import from_followed, sse_response
from agentic_api.serving.results import Replayed
from agentic_api.wire.limits import MAX_IDEMPOTENCY_KEY_LENGTH

HEADER = "Idempotency-Key"
# Tells a client (and its logs) that this answer is the stored outcome of an earlier
# request, not a new run.
REPLAYED = {"idempotent-replayed": "true"}


def idempotency_key(request: Request) -> str | None:
    value = request.headers.get(HEADER)
    if value is None:
        return None
    value = value.strip()
    if not 0 < len(value) <= MAX_IDEMPOTENCY_KEY_LENGTH or not _visible_ascii(value):
        raise InvalidRequest(
            f"{HEADER} must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters.",
            param=HEADER,
            code="invalid_idempotency_key",
        )
    return value


def replay(replayed: Replayed) -> Response:
    """The stored outcome: the same JSON status and body, or the response's event stream
    (followed live when the response is a background one still running)."""
    if replayed.events is not None:
        streamed = sse_response(from_followed(replayed.events))
        streamed.headers.update(REPLAYED)
        return streamed
    return JsonResponse(replayed.body, status_code=replayed.status_code, headers=REPLAYED)


def _visible_ascii(value: str) -> bool:
    return all(" " <= char <= "~" for char in value)
