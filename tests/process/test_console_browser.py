"""The console in a real browser: Debian's headless Chromium (``/usr/bin/chromium``),
driven by Playwright, against ``agentic-api serve`` as a subprocess following the
simulator's KV events. A person logs in, opens a tenant, a session with real turns, the
turn whose cache missed and why, follows a fork in a lineage tree; the page's numbers
are the admin API's; stored XSS payloads never run (no dialog, no ``window.__xss``).

Screenshots go to ``$CONSOLE_SCREENSHOTS`` when set (docs/console/ was made so, see its
README), else to the test's own folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from playwright.sync_api import Dialog, sync_playwright

from tests.support.console import cells, number
from tests.support.console_browser import CHROMIUM, CHROMIUM_ARGS, log_in_page
from tests.support.console_payloads import LOOKUP_TOOL, MARKUP_PAYLOADS
from tests.support.processes import Process, process_env
from tests.support.tenants import create_admin_key, create_tenant
from tests.upstream_sim import Call, Reply, SimServer, ToolCalls

pytestmark = pytest.mark.slow

MODEL = "sim-model"
BLOCK = 16
CAPACITY_BLOCKS = 40


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def wait_for(check: Callable[[], bool]) -> None:
    # KV events reach the server on another socket, a moment after the turn.
    deadline = time.monotonic() + 15
    while not check():
        assert time.monotonic() < deadline, "the KV events never arrived"
        time.sleep(0.1)


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def kv_sim() -> Iterator[SimServer]:
    folder = Path(tempfile.mkdtemp(prefix="kv-"))  # ipc:// paths must stay short
    try:
        with SimServer(
            block_size=BLOCK,
            cache_capacity_blocks=CAPACITY_BLOCKS,
            kv_events_endpoint=f"ipc://{folder}/sim.ipc",
            kv_events_topic="replica-a",
        ) as server:
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def served(fresh_db: str, kv_sim: SimServer, tmp_path: Path) -> Iterator[Process]:
    env = process_env(
        fresh_db,
        kv_sim.url,
        tmp_path / "data",
        http_workers=1,
        kv_events_endpoints=f"replica-a={kv_sim.config.kv_events_endpoint}",
    )
    server = Process.serve(env)
    try:
        yield server
    finally:
        server.stop()


def test_a_person_finds_why_a_turn_missed_the_cache(
    backend: str,
    fresh_db: str,
    served: Process,
    kv_sim: SimServer,
    screenshots: Path,
    request: pytest.FixtureRequest,
) -> None:
    tenant = create_tenant(fresh_db, f"acme-{backend}")
    admin_key = create_admin_key(fresh_db)
    client = OpenAI(base_url=f"{served.url}/v1", api_key=tenant.api_key, timeout=30)
    admin = httpx.Client(
        base_url=f"{served.url}/admin/v1",
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=30,
    )
    # Closed however the test ends (a browser that cannot start included).
    request.addfinalizer(client.close)
    request.addfinalizer(admin.close)

    # An agent's conversation: two turns reuse the cache, a third changes the tools, then
    # it pauses while another tenant fills the small cache, and its resume misses.
    agent = client.conversations.create(metadata={"agent": "planner"})
    for turn, tools in enumerate(([], [], [LOOKUP_TOOL])):
        client.responses.create(
            model=MODEL,
            input=words(f"step{turn}-", 40),
            conversation=agent.id,
            tools=tools or [],
        )

    def resident() -> bool:
        view = admin.get(f"/conversations/{agent.id}/residency").json()
        return bool(view["resident_tokens"])

    wait_for(resident)
    other = OpenAI(base_url=f"{served.url}/v1", api_key=create_tenant(fresh_db).api_key, timeout=30)
    other.responses.create(model=MODEL, input=words("busy", 400))

    def evicted() -> bool:
        view = admin.get(f"/conversations/{agent.id}/residency").json()
        return any(r["evictions"] for r in view["replicas"])

    wait_for(evicted)
    client.responses.create(
        model=MODEL, input="And now?", conversation=agent.id, tools=[LOOKUP_TOOL]
    )

    # A chain with a fork, and a session full of XSS payloads.
    kv_sim.push(Reply("root"), Reply("left"), Reply("right"), Reply("left, then"))
    root = client.responses.create(model=MODEL, input="Plan the trip")
    left = client.responses.create(model=MODEL, input="By train", previous_response_id=root.id)
    client.responses.create(model=MODEL, input="By plane", previous_response_id=root.id)
    onward = client.responses.create(
        model=MODEL, input="Which seats?", previous_response_id=left.id
    )
    evil = client.conversations.create(
        metadata={f"k{i}": p for i, p in enumerate(MARKUP_PAYLOADS)},
        items=[{"type": "message", "role": "user", "content": " ".join(MARKUP_PAYLOADS)}],
    )
    kv_sim.push(Reply(" ".join(MARKUP_PAYLOADS)))
    evil_turn = client.responses.create(
        model=MODEL,
        input=" ".join(MARKUP_PAYLOADS),
        conversation=evil.id,
        tools=[{**LOOKUP_TOOL, "description": " ".join(MARKUP_PAYLOADS)}],
    )

    timeline = admin.get(f"/tenants/{tenant.id}/conversations/{agent.id}/timeline").json()
    turns = timeline["data"]
    assert len(turns) == 4
    assert turns[2]["cache_break"]["broken"]
    missed = turns[3]
    assert missed["residency"] is not None and missed["residency"]["cause"] == "evicted"

    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})

            def refuse(dialog: Dialog) -> None:
                dialogs.append(dialog.message)
                dialog.dismiss()

            page.on("dialog", refuse)

            def shot(name: str) -> None:
                page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True)

            def no_xss() -> None:
                assert page.evaluate("typeof window.__xss") == "undefined"
                assert dialogs == []

            page.goto(f"{served.url}/console")
            assert page.url.endswith("/console/login")
            page.fill("input[name=admin_key]", admin_key)
            shot("0-login")
            page.click("button[type=submit]")
            page.wait_for_url(f"{served.url}/console")
            shot("1-tenants")

            # Click 1: the tenant.
            page.click(f"text={tenant.name}")
            page.wait_for_selector("#sessions")
            shown = cells(page.content())[""]
            stats = admin.get(f"/tenants/{tenant.id}/cache_stats").json()["total"]
            assert shown["turns"] == number(stats["turns"])
            assert shown["cached_tokens"] == number(stats["cached_tokens"])
            page.wait_for_function(
                "[...document.images].every(i => i.complete && i.naturalWidth > 0)"
            )
            shot("2-tenant")

            # Click 2: the agent's session, whose last row says why it missed.
            page.click(f"a:has-text('{agent.id}')")
            page.wait_for_selector("#timeline")
            rows = cells(page.content())
            for turn in turns:
                row = rows[turn["id"]]
                assert row["input_tokens"] == number(turn["usage"]["input_tokens"])
                assert row["cached_tokens"] == number(turn["usage"]["cached_tokens"])
            assert rows[turns[2]["id"]]["change"] == "tools"
            assert rows[missed["id"]]["residency"] == "evicted"
            shot("3-timeline")

            # Click 3: the missed turn itself, its token account and items.
            page.click(f"tr[data-turn='{missed['id']}'] >> text=response")
            page.wait_for_selector("#item-list")
            assert "evicted" in page.inner_text("main")
            shot("4-turn")

            # The lineage tree of the forked chain, and following one branch.
            page.goto(f"{served.url}/console/responses/{root.id}/lineage")
            assert "fork: 2 branches" in page.inner_text("#descendants")
            shot("5-lineage")
            page.click(f"#descendants a:has-text('{left.id}')")
            page.wait_for_url(f"**/responses/{left.id}/lineage")
            ancestors = page.locator("#ancestors li").all_inner_texts()
            assert [root.id in ancestors[0], left.id in ancestors[1]] == [True, True]
            assert onward.id in page.inner_text("#descendants")
            shot("5b-lineage-branch")

            page.goto(f"{served.url}/console/tenants/{tenant.id}/residency")
            assert "replica-a" in page.inner_text("main")
            shot("6-residency")
            page.goto(f"{served.url}/console/jobs?state=failed")
            shot("7-jobs")
            page.goto(f"{served.url}/console/tenants/{tenant.id}/actions/rotate_salt")
            shot("8-confirm")

            # The payloads, everywhere they are shown: text, never code.
            for path in (
                f"/console/tenants/{tenant.id}",
                f"/console/tenants/{tenant.id}/timeline?session={evil.id}",
                f"/console/responses/{evil_turn.id}",
                f"/console/responses/{evil_turn.id}/lineage",
            ):
                page.goto(served.url + path)
                page.wait_for_load_state("load")
                no_xss()
                for link in page.locator("a").evaluate_all("links => links.map(a => a.href)"):
                    assert not str(link).lower().startswith("javascript:")
            page.goto(f"{served.url}/console/responses/{evil_turn.id}")
            assert MARKUP_PAYLOADS[0] in page.inner_text("#item-list")
            shot("9-xss-as-text")
        finally:
            browser.close()
    _check_screens(screenshots)


def _check_screens(folder: Path) -> None:
    made: list[Any] = sorted(p.name for p in folder.glob("*.png"))
    assert len(made) == 11, made


def test_a_person_follows_a_subagent_from_its_tree_to_its_own_response(
    backend: str, fresh_db: str, sim: SimServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A multi-agent response's page shows its tree; each subagent's row links to the
    response its tree stored, and clicking it opens that response's page."""
    # The simulator tells the agents apart by the agentic_context this setting sends.
    env = process_env(fresh_db, sim.url, tmp_path / "data", router_agentic_context="true")
    served = Process.serve(env)
    request.addfinalizer(served.stop)
    tenant = create_tenant(fresh_db, f"tree-{backend}")
    admin_key = create_admin_key(fresh_db)
    client = OpenAI(base_url=f"{served.url}/v1", api_key=tenant.api_key, timeout=30)
    request.addfinalizer(client.close)
    sim.push_for(
        "/root",
        ToolCalls([Call("spawn_agent", {"task_name": "alpha", "message": "Find A."})]),
        ToolCalls([Call("wait_agent", {})]),
        Reply("A is 1."),
    )
    sim.push_for("/root/alpha", Reply("A is 1, I checked."))
    root = client.beta.responses.create(
        model=MODEL,
        input="What is A? Ask a helper.",
        multi_agent={"enabled": True},
        betas=["responses_multi_agent=v1"],
    )
    assert root.status == "completed"
    admin = httpx.Client(
        base_url=f"{served.url}/admin/v1",
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=30,
    )
    request.addfinalizer(admin.close)
    agents = admin.get(f"/responses/{root.id}/agents").json()["agents"]
    alpha_id = {a["agent_name"]: a["response_id"] for a in agents}["/root/alpha"]
    assert alpha_id and alpha_id != root.id

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            log_in_page(page, served.url, admin_key)
            page.goto(f"{served.url}/console/responses/{root.id}")
            page.wait_for_selector("#agents")
            rows = cells(page.content())
            assert rows["/root"]["response"] == "this response"
            assert rows["/root/alpha"]["response"] == alpha_id
            page.click(f"tr[data-turn='/root/alpha'] >> a:has-text('{alpha_id}')")
            page.wait_for_url(f"**/console/responses/{alpha_id}")
            assert alpha_id in page.inner_text("h1")
            assert "A is 1, I checked." in page.inner_text("#item-list")
        finally:
            browser.close()
