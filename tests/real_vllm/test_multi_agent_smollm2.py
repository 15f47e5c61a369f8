"""A multi-agent tree on SmolLM2 (real CPU vLLM, issue 37 slice D): the root is made to
spawn two subagents (a tool choice forcing ``spawn_agent`` applies to the root's rounds
until it has started ``max_concurrent_subagents`` of them: SmolLM2 makes one call a round),
the subagents and the root then run freely, and the response completes.

A recording proxy between our server and vLLM keeps every agent's request and answer, so
each agent's token account (prompt, cached and output tokens of each of its requests) is
reported, and each subagent's first request is checked against its parent's: measured
cached tokens == every full block of the token prefix the two prompts share (the prompts
rendered by vLLM's own ``/v1/responses/render``). Each subagent is then retrieved as the
response of its own that the spawn's result names."""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from openai import OpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentic_api.cache.accounting import common_prefix
from tests.conftest import RunningServer, app_server
from tests.real_vllm.conftest import RealVllm
from tests.support.admin_api import AdminApi
from tests.support.servers import ThreadedServer
from tests.support.tenants import create_tenant

pytestmark = pytest.mark.real_vllm

ROOT = "/root"
# Long enough to span several KV blocks, so "every full block" is more than one.
HANDBOOK = " ".join(
    f"Rule {n}: a lead splits the work into small tasks, gives each helper one task with "
    "its constraints, waits for the helpers, checks their answers and reports briefly."
    for n in range(1, 9)
)


@dataclass
class Recorder:
    upstream: str
    # The proxy's own URL, once it listens.
    url: str = ""
    exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    def app(self) -> Starlette:
        async def forward(request: Request) -> Response:
            body = await request.body()
            headers = {
                k: v
                for k, v in request.headers.items()
                if k.lower() not in ("host", "content-length")
            }
            async with httpx.AsyncClient(timeout=600) as client:
                answer = await client.request(
                    request.method,
                    f"{self.upstream}{request.url.path}",
                    params=request.query_params,
                    content=body,
                    headers=headers,
                )
            media = answer.headers.get("content-type", "")
            if (
                request.url.path == "/v1/responses"
                and request.method == "POST"
                and media.startswith("application/json")
                and answer.status_code == 200
            ):
                # The tree's requests (JSON); the server's own probes stream and pass by.
                self.exchanges.append((json.loads(body), answer.json()))
            return Response(
                answer.content,
                status_code=answer.status_code,
                media_type=answer.headers.get("content-type"),
            )

        methods = ["GET", "POST", "DELETE", "HEAD"]
        return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


@pytest.fixture(scope="module")
def recorder(smollm2: RealVllm) -> Iterator[Recorder]:
    recording = Recorder(smollm2.url)
    proxy = ThreadedServer(recording.app(), strict=False).start()
    recording.url = proxy.url
    try:
        yield recording
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def tree_server(
    backend: str, db_url: str, recorder: Recorder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    with app_server(
        backend,
        db_url,
        recorder.url,
        tmp_path_factory.mktemp("smol-tree"),
        router_agentic_context=True,
        token_artifacts="required",
        multi_agent_max_depth=1,
        multi_agent_max_rounds=4,
    ) as running:
        yield running


def agent_of(body: dict[str, Any]) -> str:
    context = json.loads(body["vllm_xargs"]["agentic_context"])
    return str(context["agent_id"])


def rendered(smollm2: RealVllm, body: dict[str, Any]) -> list[int]:
    keep = {k: v for k, v in body.items() if k not in ("stream", "enable_response_messages")}
    answer = httpx.post(f"{smollm2.url}/v1/responses/render", json=keep, timeout=120)
    answer.raise_for_status()
    data = answer.json()
    ids = data.get("token_ids") or data.get("prompt_token_ids")
    assert isinstance(ids, list), sorted(data)
    return [int(i) for i in ids]


def common(a: list[int], b: list[int]) -> int:
    return common_prefix(array("q", a), array("q", b))


def test_a_tree_runs_on_smollm2(
    smollm2: RealVllm,
    recorder: Recorder,
    tree_server: RunningServer,
    report: list[dict[str, Any]],
) -> None:
    recorder.exchanges.clear()  # the proxy outlives one backend's run
    client: OpenAI = tree_server.client(create_tenant(tree_server.db_url), timeout=600)
    response = client.beta.responses.create(
        model=smollm2.model,
        instructions=f"You are the lead of a research team. {HANDBOOK}",
        input="Find the capital of France and the capital of Italy.",
        tool_choice={"type": "function", "name": "spawn_agent"},
        temperature=0,
        max_output_tokens=160,
        multi_agent={"enabled": True, "max_concurrent_subagents": 2},
        betas=["responses_multi_agent=v1"],
    )
    # The tree ran to its end: completed, or only the lead's closing message cut at the
    # output limit (the 135M model sometimes repeats itself there, at any limit tried).
    last = response.output[-1]
    closing_cut = (
        response.status == "incomplete"
        and response.incomplete_details is not None
        and response.incomplete_details.reason == "max_output_tokens"
        and last.type == "message"
        and last.agent is not None
        and last.agent.agent_name == ROOT
    )
    assert response.status == "completed" or closing_cut, (
        response.error,
        response.incomplete_details,
        [(item.type, item.agent and item.agent.agent_name) for item in response.output],
    )
    names = {item.agent.agent_name for item in response.output if item.agent is not None}
    subagents = sorted(name for name in names if name != ROOT)
    # The 135M model's forced first round makes one spawn call or two: at temperature 0
    # on CPU vLLM both were seen for the same prompt (its numerics depend on what the
    # prefix cache already held). Every subagent it spawned is checked below.
    assert 1 <= len(subagents) <= 2, [item.type for item in response.output]

    by_agent: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for body, answer in recorder.exchanges:
        by_agent.setdefault(agent_of(body), []).append((body, answer))
    assert set(subagents) <= set(by_agent)
    # Every agent's account.
    for name, exchanges in sorted(by_agent.items()):
        for index, (_, answer) in enumerate(exchanges):
            usage = answer["usage"]
            report.append(
                {
                    "test": "multi-agent-tree",
                    "backend": tree_server.backend,
                    "agent": name,
                    "request": index,
                    "input_tokens": usage["input_tokens"],
                    "cached_tokens": usage["input_tokens_details"]["cached_tokens"],
                    "output_tokens": usage["output_tokens"],
                }
            )
    admin = AdminApi(tree_server.url, tree_server.db_url)
    try:
        listed = admin.get(f"/responses/{response.id}/agents")["agents"]
    finally:
        admin.close()
    accounts = {agent["agent_name"]: agent for agent in listed}
    assert set(accounts) == set(by_agent)
    root_exchanges = by_agent[ROOT]
    block = smollm2.block_size
    for name in subagents:
        first_body, first_answer = by_agent[name][0]
        child = rendered(smollm2, first_body)
        # The parent's round that spawned it: the latest root request whose input the
        # child's input starts with.
        parent_body = max(
            (
                body
                for body, _ in root_exchanges
                if first_body["input"][: len(body["input"])] == body["input"]
            ),
            key=lambda body: len(body["input"]),
        )
        shared = common(rendered(smollm2, parent_body), child)
        expected = shared // block * block
        # What any other request of the tree could have left cached for it (a sibling
        # spawned in the same round shares the start of its task message too).
        others = [body for body, _ in recorder.exchanges if body is not first_body]
        best = max(common(rendered(smollm2, body), child) for body in others) // block * block
        measured = first_answer["usage"]["input_tokens_details"]["cached_tokens"]
        report.append(
            {
                "test": "multi-agent-first-request",
                "backend": tree_server.backend,
                "agent": name,
                "shared_prefix_tokens": shared,
                "expected_cached": expected,
                "best_possible_cached": best,
                "measured_cached": measured,
            }
        )
        assert expected >= 4 * block  # the handbook spans several blocks
        assert measured == expected
        # The server's own account of it (from the ids vLLM reported) says the same.
        own = accounts[name]["first_request"]
        assert own is not None, accounts[name]
        assert (own["shared_prefix_tokens"], own["expected_cached"]) == (shared, expected)
        assert own["measured_cached"] == measured and own["hit"] is True
        # Its own stored response, named in the admin view, is the tenant's to retrieve.
        stored = client.responses.retrieve(accounts[name]["response_id"])
        assert stored.status in ("completed", "failed"), stored.error
        assert stored.usage is not None
        assert stored.usage.input_tokens == sum(
            answer["usage"]["input_tokens"] for _, answer in by_agent[name]
        )
