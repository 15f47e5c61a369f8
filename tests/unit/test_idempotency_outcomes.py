"""The status a keyed replay of a stored failure answers is derived from the failure's code
(idempotency.json_outcome): the database's own states keep their 503, so the replay tells
the same truth as the first answer; upstream timeouts are 504, a refused commit 500, and
every other stored code an upstream failure, 502."""

from __future__ import annotations

import pytest

from agentic_api.idempotency import json_outcome


def failed() -> dict[str, object]:
    return {
        "id": "resp_1",
        "status": "failed",
        "error": {"code": "server_error", "message": "it failed"},
    }


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("database_unavailable", 503),
        ("database_busy", 503),
        ("storage_full", 503),
        ("upstream_timeout", 504),
        ("commit_failed", 500),
        ("upstream_error", 502),
    ],
)
def test_a_replayed_failure_answers_its_codes_status(code: str, status: int) -> None:
    outcome = json_outcome(failed(), {"code": code, "message": "it failed"})
    assert outcome.status_code == status
    assert outcome.body is not None
    assert outcome.body["error"]["code"] == code
    assert outcome.response_id == "resp_1"


def test_a_completed_response_is_answered_as_it_is() -> None:
    final = {"id": "resp_2", "status": "completed"}
    outcome = json_outcome(final)
    assert (outcome.status_code, outcome.body) == (200, final)
