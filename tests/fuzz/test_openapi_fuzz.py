"""The fuzz tier: schemathesis generates requests from our own ``/openapi.json`` (valid
ones and invalid ones) for every operation, public routes with a tenant key and admin
routes with an admin key, against the real server on loopback (SQLite and PostgreSQL,
the simulator as the model). Any 5xx, undocumented status, wrong content type or body
that does not match the document fails the run.

``AGENTIC_FUZZ_EXAMPLES`` (default 170) bounds the valid examples per operation, which
gives over 5,000 requests per database. Invalid examples cost schemathesis far more to
make (about a second each for a create body, against ~10 ms for a valid one), so each
operation gets a fifteenth as many of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agentic_api.wire.requests import CreateResponseRequest
from tests.support.processes import Process, process_env
from tests.support.tenants import create_admin_key, create_tenant
from tests.support.typed import narrow
from tests.upstream_sim import SimServer

pytestmark = pytest.mark.fuzz

EXAMPLES = {GenerationMode.POSITIVE: int(os.environ.get("AGENTIC_FUZZ_EXAMPLES", "170"))}
EXAMPLES[GenerationMode.NEGATIVE] = max(1, EXAMPLES[GenerationMode.POSITIVE] // 15)
# The run must have sent at least this many requests per database (the bar).
MIN_REQUESTS = int(os.environ.get("AGENTIC_FUZZ_MIN_REQUESTS", "5000"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
DECLARED = set(CreateResponseRequest.model_fields)
# Routes outside the API proper: the document itself and its HTML viewers.
NOT_FUZZED = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def fuzz_operation(
    operation: Any,
    mode: GenerationMode,
    call: Callable[[Any], None],
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode), use_model=st.booleans())
    @settings(
        max_examples=EXAMPLES[mode],
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any, use_model: bool) -> None:
        call((case, use_model))

    try:
        run()
    except Unsatisfiable:
        # Nothing invalid can be made for an operation that takes no input.
        assert mode is GenerationMode.NEGATIVE, operation.label


@pytest.fixture
def served(fresh_db: str, sim: SimServer, tmp_path: Path) -> Iterator[Process]:
    """``agentic-api serve`` as a process of its own: generating cases is CPU-bound, and
    a server in this process would share its interpreter lock."""
    process = Process.serve(process_env(fresh_db, sim.url, tmp_path / "data"))
    try:
        yield process
    finally:
        process.stop()


def test_fuzz_the_documented_api(
    served: Process, fresh_db: str, backend: str, sim: SimServer
) -> None:
    tenant = create_tenant(fresh_db)
    admin_key = create_admin_key(fresh_db)
    base_url = served.url
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    session = requests.Session()
    sent: dict[str, int] = {}
    statuses: dict[int, int] = {}
    failures: list[str] = []
    started = time.monotonic()

    def call(drawn: tuple[Any, bool]) -> None:
        case, use_model = drawn
        path = case.operation.path
        key = admin_key if path.startswith("/admin/") else tenant.api_key
        if use_model and isinstance(case.body, dict) and isinstance(case.body.get("model"), str):
            # Half the turns name the model the simulator serves, without the invented
            # fields that pass through (which it refuses, as vLLM does), so they reach
            # the model and are stored and streamed, not only refused upstream.
            case.body = {k: v for k, v in case.body.items() if k in DECLARED}
            case.body["model"] = sim.config.model
        headers = {"authorization": f"Bearer {key}"}
        response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
        sent[case.operation.label] = sent.get(case.operation.label, 0) + 1
        statuses[response.status_code // 100] = statuses.get(response.status_code // 100, 0) + 1
        case.validate_response(response, checks=CHECKS, headers=headers)

    for result in schema.get_all_operations():
        operation = narrow(result, Ok).ok()
        if operation.path in NOT_FUZZED:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz_operation(operation, mode, call)
            except AssertionError as failure:  # schemathesis' failures are assertions
                # Every operation gets its run; all failures are reported together.
                failures.append(f"{operation.label} ({mode.value}): {failure}")
    seconds = time.monotonic() - started
    total = sum(sent.values())
    print(
        f"\nfuzz [{backend}]: {total} requests over {len(sent)} operations "
        f"in {seconds:.0f} s ({total / seconds:.0f}/s), {len(failures)} failures; "
        + ", ".join(f"{kind}xx: {count}" for kind, count in sorted(statuses.items()))
        + f"; {sim.calls('/v1/responses')} reached the model"
    )
    assert not failures, "\n\n".join(failures)
    assert total >= MIN_REQUESTS, f"only {total} requests were generated"
