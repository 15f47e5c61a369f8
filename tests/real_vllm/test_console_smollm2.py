"""The console on a real model's session: a SmolLM2-135M-Instruct conversation (CPU vLLM,
temperature 0) opened in headless Chromium, its timeline's numbers equal to the admin
timeline's, token accounts included. Run with ``pytest -m real_vllm tests/real_vllm``."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import sync_playwright

from tests.conftest import RunningServer
from tests.real_vllm.conftest import RealVllm
from tests.support.console import cells, number
from tests.support.console_browser import CHROMIUM, CHROMIUM_ARGS, log_in_page
from tests.support.tenants import create_admin_key, create_tenant

pytestmark = pytest.mark.real_vllm

QUESTIONS = (
    "List three fruits, one per line.",
    "Now three vegetables, one per line.",
    "And three colors, one per line.",
)


def test_a_smollm2_session_in_the_console_equals_the_admin_timeline(
    smol_server: RunningServer, smollm2: RealVllm
) -> None:
    tenant = create_tenant(smol_server.db_url)
    admin_key = create_admin_key(smol_server.db_url)
    client = smol_server.client(tenant, timeout=300)
    conversation = client.conversations.create()
    for question in QUESTIONS:
        answer = client.responses.create(
            model=smollm2.model,
            input=question,
            conversation=conversation.id,
            temperature=0,
            max_output_tokens=40,
        )
        assert answer.status in ("completed", "incomplete"), answer
    with httpx.Client(
        base_url=f"{smol_server.url}/admin/v1",
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=60,
    ) as admin:
        timeline = admin.get(f"/tenants/{tenant.id}/conversations/{conversation.id}/timeline")
        assert timeline.status_code == 200, timeline.text
    turns = timeline.json()["data"]
    assert len(turns) == len(QUESTIONS)
    # A real model's continuations reuse real cached blocks, and every turn has an account.
    assert all(turn["tokens"] is not None for turn in turns)
    assert sum(turn["usage"]["cached_tokens"] for turn in turns) > 0

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            log_in_page(page, smol_server.url, admin_key)
            page.goto(
                f"{smol_server.url}/console/tenants/{tenant.id}/timeline?session={conversation.id}"
            )
            page.wait_for_selector("#timeline")
            rows = cells(page.content())
        finally:
            browser.close()
    for turn in turns:
        row = rows[turn["id"]]
        tokens = turn["tokens"]
        assert row["input_tokens"] == number(turn["usage"]["input_tokens"])
        assert row["cached_tokens"] == number(turn["usage"]["cached_tokens"])
        assert row["expected_cached"] == number(tokens["expected_cached"])
        assert row.get("cause", "") == (tokens["cause"] or "")
        lost = " ".join(f"{v:,} {k}" for k, v in tokens["lost"].items())
        assert row["lost"] == (lost or "0")
