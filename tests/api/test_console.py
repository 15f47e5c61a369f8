"""The operator console (/console) over real HTTP, on SQLite and PostgreSQL: who may open
it (admin keys only, and only while one exists), its cookies and headers, CSRF on every
form, stored XSS payloads shown as text, numbers equal to the admin API's, and a number
of SQL statements per page that does not grow with the rows shown."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from openai import OpenAI
from openai.types.responses import FunctionToolParam
from sqlalchemy import event

from agentic_api.app import create_app
from agentic_api.operator.http.console.headers import PAGE_POLICY
from tests.conftest import RunningServer, running_server, server_settings
from tests.support.console import cells, csrf_token, log_in, login_token, number
from tests.support.console_payloads import LOOKUP_TOOL, MARKUP_PAYLOADS
from tests.support.console_seed import seed_chain, seed_conversations
from tests.support.servers import ThreadedServer
from tests.support.sql import execute, rows
from tests.support.tenants import TenantKeys, create_admin_key, create_tenant
from tests.upstream_sim import Reply, SimServer

MODEL = "sim-model"
RAW_MARKUP = ("<script", "<img src=x", "<svg onload", 'onerror="window', 'href="javascript:')


@pytest.fixture
def admin_key(server: RunningServer) -> str:
    return create_admin_key(server.db_url)


@pytest.fixture
def console(server: RunningServer, admin_key: str) -> Iterator[httpx.Client]:
    with log_in(server.url, admin_key) as http:
        yield http


@pytest.fixture
def admin(server: RunningServer, admin_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{server.url}/admin/v1",
        headers={"Authorization": f"Bearer {admin_key}"},
        timeout=20,
    ) as http:
        yield http


def ok(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.text


def api(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# -- who may open it ------------------------------------------------------------------------


def test_no_admin_key_no_console(
    backend: str, fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    with (
        running_server(fresh_db, sim, tmp_path) as running,
        httpx.Client(base_url=running.url, timeout=20) as http,
    ):
        assert http.get("/console/login").status_code == 404
        assert http.get("/console").status_code == 303
        # Once a key exists, the same server opens it.
        create_admin_key(fresh_db)
        assert http.get("/console/login").status_code == 200


def test_console_off_by_setting(
    backend: str, fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    create_admin_key(fresh_db)
    with (
        running_server(fresh_db, sim, tmp_path, console_enabled=False) as running,
        httpx.Client(base_url=running.url, timeout=20) as http,
    ):
        assert http.get("/console/login").status_code == 404
        assert http.get("/console").status_code == 404


def test_tenant_keys_and_strangers_never_open_it(
    server: RunningServer, tenant: TenantKeys, admin_key: str
) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        assert http.get("/console").headers["location"] == "/console/login"
        # A bearer key opens nothing: only the login cookie does.
        bearer = {"Authorization": f"Bearer {admin_key}"}
        assert http.get("/console", headers=bearer).status_code == 303
        form = http.get("/console/login")
        refused = http.post(
            "/console/login",
            data={"admin_key": tenant.api_key, "login_token": login_token(form.text)},
        )
        assert refused.status_code == 401
        assert "agentic_console=" not in refused.headers.get("set-cookie", "")
        assert http.get("/console").status_code == 303
        # A forged cookie is no login either.
        http.cookies.set("agentic_console", "adk_x.9999999999.nonce.mac", path="/console")
        assert http.get("/console").status_code == 303


def test_login_cookie_flags_and_logout(server: RunningServer, admin_key: str) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        form = http.get("/console/login")
        done = http.post(
            "/console/login", data={"admin_key": admin_key, "login_token": login_token(form.text)}
        )
        assert done.status_code == 303
        cookie = next(
            c for c in done.headers.get_list("set-cookie") if c.startswith("agentic_console=")
        )
        flags = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "max-age", "path"} <= flags
        assert "samesite=strict" in cookie.lower() and "path=/console" in cookie.lower()
        assert "secure" not in flags  # plain HTTP here; see the TLS test below
        value = cookie.split(";")[0].split("=", 1)[1]
        assert admin_key not in value and admin_key[-20:] not in value
        page = ok(http.get("/console"))
        logout = http.post("/console/logout", data={"csrf_token": csrf_token(page)})
        assert logout.status_code == 303
        assert http.get("/console").status_code == 303


def test_logout_ends_the_session_for_a_copied_cookie(server: RunningServer, admin_key: str) -> None:
    with log_in(server.url, admin_key) as http, log_in(server.url, admin_key) as other:
        copied = http.cookies["agentic_console"]
        page = ok(http.get("/console"))
        logout = http.post("/console/logout", data={"csrf_token": csrf_token(page)})
        assert logout.status_code == 303
        with httpx.Client(base_url=server.url, timeout=20) as thief:
            thief.cookies.set("agentic_console", copied, path="/console")
            assert thief.get("/console").status_code == 303
            # Logging out twice changes nothing and opens nothing.
            assert thief.post("/console/logout", data={}).status_code == 303
            assert thief.get("/console").status_code == 303
        # Only that session ended: another login with the same key still opens pages.
        ok(other.get("/console"))


def test_cookie_is_secure_behind_tls(server: RunningServer, admin_key: str) -> None:
    # uvicorn takes the scheme from X-Forwarded-Proto of a trusted (loopback) proxy.
    tls = {"X-Forwarded-Proto": "https"}
    with httpx.Client(base_url=server.url, timeout=20, headers=tls) as http:
        form = http.get("/console/login")
        assert "secure" in form.headers["set-cookie"].lower()
        done = http.post(
            "/console/login", data={"admin_key": admin_key, "login_token": login_token(form.text)}
        )
        assert "; secure" in done.headers["set-cookie"].lower()


def test_a_revoked_admin_key_ends_its_sessions(server: RunningServer) -> None:
    key = create_admin_key(server.db_url)
    with log_in(server.url, key) as http:
        assert http.get("/console").status_code == 200
        _revoke_admin_keys(server.db_url, key)
        assert http.get("/console").status_code == 303


def _revoke_admin_keys(db_url: str, plaintext: str) -> None:
    import asyncio

    from sqlalchemy import update

    from agentic_api.storage.database import Database
    from agentic_api.storage.models import AdminKey
    from agentic_api.storage.tenants import hash_key
    from agentic_api.storage.types import utcnow

    async def run() -> None:
        db = Database.from_url(db_url, pool_size=1)
        try:
            async with db.write() as session:
                await session.execute(
                    update(AdminKey)
                    .where(AdminKey.key_hash == hash_key(plaintext))
                    .values(revoked_at=utcnow())
                )
        finally:
            await db.close()

    asyncio.run(run())


def test_every_page_is_locked_down(
    server: RunningServer, console: httpx.Client, tenant: TenantKeys
) -> None:
    for path in ("/console", f"/console/tenants/{tenant.id}", "/console/jobs", "/console/login"):
        answer = console.get(path)
        assert answer.headers["content-security-policy"] == PAGE_POLICY
        assert "script" not in PAGE_POLICY and "unsafe" not in PAGE_POLICY
        assert "frame-ancestors 'none'" in PAGE_POLICY
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert answer.headers["cache-control"] == "no-store"
        assert "<script" not in answer.text


def _assert_console_headers(answer: httpx.Response) -> None:
    assert answer.headers["content-security-policy"] == PAGE_POLICY
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["referrer-policy"] == "same-origin"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["cross-origin-opener-policy"] == "same-origin"
    assert answer.headers["content-type"].startswith("text/html")
    assert "<script" not in answer.text


@pytest.mark.parametrize("logged_in", [False, True], ids=["stranger", "operator"])
def test_unknown_console_paths_answer_the_consoles_own_locked_down_404(
    server: RunningServer, admin_key: str, logged_in: bool
) -> None:
    with (
        log_in(server.url, admin_key)
        if logged_in
        else httpx.Client(base_url=server.url, timeout=20)
    ) as http:
        for method, path in [
            ("GET", "/console/nope"),
            ("GET", "/console/tenants/ten_x/nope/deeper"),
            ("POST", "/console/nope"),
            ("GET", "/console/static/other.css"),
            ("GET", "/console/%3Cscript%3Ealert(1)%3C%2Fscript%3E"),
        ]:
            answer = http.request(method, path)
            assert answer.status_code == 404, (method, path, answer.text)
            _assert_console_headers(answer)
            assert "Not found." in answer.text
        # A console page asked with a method it does not serve: the console's 405.
        refused = http.delete("/console/login")
        assert refused.status_code == 405
        assert refused.headers["allow"] == "GET, POST"
        _assert_console_headers(refused)
    # Outside the console, unknown paths keep the API's JSON 404.
    api_404 = httpx.get(f"{server.url}/v1/nope", timeout=20)
    assert api_404.status_code == 404 and api_404.json()["error"]["code"] == "not_found"


# -- CSRF ------------------------------------------------------------------------------------


def _tenant_status(admin: httpx.Client, tenant_id: str) -> tuple[str, int]:
    body = api(admin.get(f"/tenants/{tenant_id}"))
    return body["status"], body["salt_epoch"]


def test_actions_need_confirmation_and_a_valid_csrf_token(
    server: RunningServer, console: httpx.Client, admin: httpx.Client, tenant: TenantKeys
) -> None:
    path = f"/console/tenants/{tenant.id}/actions/disable"
    confirm = ok(console.get(path))
    assert "Type the tenant" in confirm
    token = csrf_token(confirm)
    before = _tenant_status(admin, tenant.id)
    assert before[0] == "active"
    refused = [
        console.post(path, data={"confirm_name": tenant.name}),  # no token
        console.post(path, data={"confirm_name": tenant.name, "csrf_token": token[:-2] + "xx"}),
        console.post(
            path,
            data={"confirm_name": tenant.name, "csrf_token": token},
            headers={"Sec-Fetch-Site": "cross-site"},
        ),
        console.post(
            path,
            data={"confirm_name": tenant.name, "csrf_token": token},
            headers={"Origin": "https://evil.example"},
        ),
        console.post(
            path,
            content=f'{{"confirm_name": "{tenant.name}", "csrf_token": "{token}"}}',
            headers={"Content-Type": "application/json"},
        ),
    ]
    assert [answer.status_code for answer in refused] == [403] * 5
    assert all("Nothing was changed" in answer.text for answer in refused)
    # Another session's token is not this one's.
    with log_in(server.url, create_admin_key(server.db_url)) as other:
        theirs = csrf_token(ok(other.get(path)))
    assert theirs != token
    assert (
        console.post(path, data={"confirm_name": tenant.name, "csrf_token": theirs}).status_code
        == 403
    )
    # The right token, the wrong name: still nothing.
    wrong = console.post(path, data={"confirm_name": "not it", "csrf_token": token})
    assert wrong.status_code == 400 and "Nothing was changed" in wrong.text
    assert _tenant_status(admin, tenant.id) == before
    done = console.post(path, data={"confirm_name": tenant.name, "csrf_token": token})
    assert done.status_code == 200, done.text
    assert _tenant_status(admin, tenant.id) == ("disabled", before[1])
    # The tenant's key stops at once (the key memo was cleared).
    with httpx.Client(base_url=server.url, timeout=20) as http:
        assert (
            http.get("/v1/models", headers={"Authorization": f"Bearer {tenant.api_key}"})
        ).status_code == 401


def test_rotate_salt_and_purge_through_the_console(
    server: RunningServer,
    console: httpx.Client,
    admin: httpx.Client,
    client: OpenAI,
    tenant: TenantKeys,
    sim: SimServer,
) -> None:
    sim.push(Reply("stored"))
    client.responses.create(model=MODEL, input="Keep me")
    for action in ("rotate_salt", "purge"):
        path = f"/console/tenants/{tenant.id}/actions/{action}"
        token = csrf_token(ok(console.get(path)))
        assert (
            console.post(path, data={"confirm_name": tenant.name, "csrf_token": token}).status_code
            == 200
        )
    assert _tenant_status(admin, tenant.id) == ("active", 2)
    assert api(admin.get(f"/tenants/{tenant.id}/cache_stats"))["total"]["turns"] == 0


def test_login_form_cannot_be_forged(server: RunningServer, admin_key: str) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as http:
        http.get("/console/login")
        assert http.post("/console/login", data={"admin_key": admin_key}).status_code == 403
        form = http.get("/console/login")
        cross = http.post(
            "/console/login",
            data={"admin_key": admin_key, "login_token": login_token(form.text)},
            headers={"Sec-Fetch-Site": "cross-site"},
        )
        assert cross.status_code == 403
    # A token without its pre-login cookie (another browser's) is refused too.
    with httpx.Client(base_url=server.url, timeout=20) as first:
        token = login_token(first.get("/console/login").text)
    with httpx.Client(base_url=server.url, timeout=20) as second:
        second.get("/console/login")
        assert (
            second.post("/console/login", data={"admin_key": admin_key, "login_token": token})
        ).status_code == 403


def test_forged_logout_is_refused(console: httpx.Client) -> None:
    assert console.post("/console/logout", data={"csrf_token": "forged"}).status_code == 403
    assert console.get("/console").status_code == 200


# -- stored XSS -------------------------------------------------------------------------------


def xss_session(client: OpenAI, sim: SimServer) -> tuple[str, str, str]:
    """A conversation whose items, metadata and session carry every payload, and a
    chain keyed by a payload (its session id is the payload)."""
    conversation = client.conversations.create(
        metadata={f"k{i}": payload[:512] for i, payload in enumerate(MARKUP_PAYLOADS)},
        items=[{"type": "message", "role": "user", "content": " ".join(MARKUP_PAYLOADS)}],
    )
    tool: FunctionToolParam = {**LOOKUP_TOOL, "description": " ".join(MARKUP_PAYLOADS)}
    sim.push(Reply(" ".join(MARKUP_PAYLOADS)))
    first = client.responses.create(
        model=MODEL, input=" ".join(MARKUP_PAYLOADS), conversation=conversation.id, tools=[tool]
    )
    sim.push(Reply("second " + MARKUP_PAYLOADS[0]))
    chained = client.responses.create(
        model=MODEL, input=MARKUP_PAYLOADS[3], prompt_cache_key=MARKUP_PAYLOADS[1][:64]
    )
    return conversation.id, first.id, chained.id


def api_session_of(console: httpx.Client, response_id: str) -> str:
    """The session a response ran in, read off its lineage page's back link."""
    html = ok(console.get(f"/console/responses/{response_id}/lineage"))
    found = re.search(r'timeline\?session=([^"]+)"', html)
    assert found
    from html import unescape
    from urllib.parse import unquote_plus

    return unquote_plus(unescape(found.group(1)))


def test_stored_xss_payloads_are_shown_as_text(
    console: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    conversation_id, response_id, chained_id = xss_session(client, sim)
    pages = [
        ok(console.get(f"/console/tenants/{tenant.id}")),
        ok(
            console.get(
                f"/console/tenants/{tenant.id}/timeline", params={"session": conversation_id}
            )
        ),
        ok(console.get(f"/console/responses/{response_id}")),
        ok(console.get(f"/console/responses/{chained_id}")),
        ok(console.get(f"/console/responses/{chained_id}/lineage")),
        ok(console.get(f"/console/tenants/{tenant.id}", params={"q": MARKUP_PAYLOADS[1][:40]})),
    ]
    for html in pages:
        for markup in RAW_MARKUP:
            assert markup not in html
    # ...and they are there, escaped: the items, the metadata, the session id.
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in pages[2]
    assert "&lt;svg onload" in pages[3]
    assert "&#34;&gt;&lt;img src=x onerror=" in pages[0]  # metadata and the chain's session
    chained_session = api_session_of(console, chained_id)
    timeline = console.get(
        f"/console/tenants/{tenant.id}/timeline", params={"session": chained_session}
    )
    assert timeline.status_code == 200 and all(m not in timeline.text for m in RAW_MARKUP)


# -- the numbers are the admin API's -----------------------------------------------------------


def test_timeline_numbers_equal_the_admin_timeline(
    console: httpx.Client, admin: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    conversation = client.conversations.create()
    for turn, tools in enumerate(([], [], [LOOKUP_TOOL], [LOOKUP_TOOL])):
        sim.push(Reply(f"Answer {turn} with enough words to fill a block or two of tokens."))
        if turn == 3:
            sim.state.cache.clear()  # the last turn's prefix is gone: not resident
        client.responses.create(
            model=MODEL, input=f"Question {turn}?", conversation=conversation.id, tools=tools
        )
    expected = api(admin.get(f"/tenants/{tenant.id}/conversations/{conversation.id}/timeline"))[
        "data"
    ]
    html = ok(
        console.get(f"/console/tenants/{tenant.id}/timeline", params={"session": conversation.id})
    )
    shown = cells(html)
    assert len(expected) == 4
    for turn in expected:
        row = shown[turn["id"]]
        assert row["input_tokens"] == number(turn["usage"]["input_tokens"])
        assert row["cached_tokens"] == number(turn["usage"]["cached_tokens"])
        tokens = turn["tokens"]
        assert row["expected_cached"] == number(tokens["expected_cached"] if tokens else None)
        assert row.get("cause", "") == (tokens["cause"] or "" if tokens else "")
        changes = [c["component"] for c in turn["cache_break"]["changes"]]
        assert row.get("change", "") == " ".join(changes)
        lost = " ".join(f"{v:,} {k}" for k, v in tokens["lost"].items()) if tokens else "—"
        assert row["lost"] == (lost or "0")
    assert shown[expected[2]["id"]]["change"] == "tools"
    assert shown[expected[3]["id"]]["cause"] == "not_resident"


def test_tenant_totals_equal_the_admin_cache_stats(
    console: httpx.Client, admin: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    previous = None
    for turn in range(3):
        sim.push(Reply(f"Reply {turn} " * 8))
        previous = client.responses.create(
            model=MODEL, input=f"Turn {turn}", previous_response_id=previous
        ).id
    stats = api(admin.get(f"/tenants/{tenant.id}/cache_stats"))["total"]
    shown = cells(ok(console.get(f"/console/tenants/{tenant.id}")))[""]
    for field in ("turns", "input_tokens", "cached_tokens", "output_tokens"):
        assert shown[field] == number(stats[field])
    assert shown["hit_ratio"] == f"{stats['hit_ratio'] * 100:.1f}%"


def test_session_rows_equal_the_admin_timeline_whatever_the_sort(
    console: httpx.Client, admin: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    conversation = client.conversations.create()
    for turn in range(3):
        sim.push(Reply(f"Answer {turn} with enough words to fill a block or two of tokens."))
        if turn == 2:
            sim.state.cache.clear()  # the last turn loses its prefix: lost tokens
        client.responses.create(
            model=MODEL, input=f"Question {turn}?", conversation=conversation.id
        )
    turns = api(admin.get(f"/tenants/{tenant.id}/conversations/{conversation.id}/timeline"))["data"]
    lost = sum(sum(t["tokens"]["lost"].values()) for t in turns if t["tokens"])
    assert lost > 0
    expected = {
        "turns": number(len(turns)),
        "input_tokens": number(sum(t["usage"]["input_tokens"] for t in turns)),
        "cached_tokens": number(sum(t["usage"]["cached_tokens"] for t in turns)),
        "lost_tokens": number(lost),
    }
    # The default sort sums lost tokens for the page's sessions only; the lost-tokens sort
    # and the lossy filter for every session: both must show the same row.
    for params in ({}, {"sort": "turns"}, {"sort": "lost_tokens"}, {"lossy": "1"}):
        shown = cells(ok(console.get(f"/console/tenants/{tenant.id}", params=params)))
        assert shown[conversation.id] == expected, params


def test_a_nul_in_a_stored_account_breaks_no_page(
    console: httpx.Client,
    admin: httpx.Client,
    client: OpenAI,
    sim: SimServer,
    server: RunningServer,
    tenant: TenantKeys,
) -> None:
    """A model may emit a NUL, and a decoded divergence piece then holds one: PostgreSQL
    keeps it in a ``json`` account but cannot read that document's parts as text, so no
    page may read lost tokens out of the account itself."""
    conversation = client.conversations.create()
    for turn in range(2):
        sim.push(Reply(f"Answer {turn} with enough words to fill a block or two of tokens."))
        if turn == 1:
            sim.state.cache.clear()
        last = client.responses.create(
            model=MODEL, input=f"Question {turn}?", conversation=conversation.id
        )
    stored = api(admin.get(f"/responses/{last.id}/token_account"))["account"]
    lost = sum(stored["lost"].values())
    assert lost > 0
    account = rows(server.db_url, "SELECT token_account FROM responses WHERE id = :id", id=last.id)
    document = account[0][0] if isinstance(account[0][0], dict) else orjson.loads(account[0][0])
    document["divergence"] = {
        "offset": 0,
        "region": "input",
        "parent_tokens": [0],
        "child_tokens": [1],
        "realigned": False,
        "splits": 0,
        "remainder": 0,
        "parent_pieces": ["model\x00said"],
        "child_pieces": ["\x00"],
    }
    value = "CAST(:doc AS JSON)" if server.db_url.startswith("postgresql") else ":doc"
    execute(
        server.db_url,
        f"UPDATE responses SET token_account = {value} WHERE id = :id",
        doc=orjson.dumps(document).decode(),
        id=last.id,
    )
    kept = rows(server.db_url, "SELECT token_account FROM responses WHERE id = :id", id=last.id)
    kept_document = kept[0][0] if isinstance(kept[0][0], dict) else orjson.loads(kept[0][0])
    assert kept_document["divergence"]["child_pieces"] == ["\x00"]
    ok(console.get("/console"))
    shown = cells(ok(console.get(f"/console/tenants/{tenant.id}", params={"sort": "lost_tokens"})))
    assert shown[conversation.id]["lost_tokens"] == number(lost)
    assert "<svg" in ok(console.get(f"/console/tenants/{tenant.id}/charts/lost.svg"))


def test_lineage_page_shows_the_admin_tree_with_its_fork(
    console: httpx.Client, admin: httpx.Client, client: OpenAI, sim: SimServer
) -> None:
    sim.push(Reply("root"), Reply("left"), Reply("right"), Reply("left again"))
    root = client.responses.create(model=MODEL, input="Root")
    left = client.responses.create(model=MODEL, input="Left", previous_response_id=root.id)
    client.responses.create(model=MODEL, input="Right", previous_response_id=root.id)
    client.responses.create(model=MODEL, input="Left 2", previous_response_id=left.id)
    tree = api(admin.get(f"/responses/{root.id}/lineage"))
    html = ok(console.get(f"/console/responses/{root.id}/lineage"))
    shown = re.findall(r'data-node="([^"]+)"', html)

    def walk(nodes: list[dict[str, Any]]) -> list[str]:
        return [i for node in nodes for i in (node["id"], *walk(node["children"]))]

    assert shown == [t["id"] for t in tree["ancestors"]] + walk(tree["descendants"])
    assert "fork: 2 branches" in html
    # Following the fork: the left branch's own page, its child below it.
    left_page = ok(console.get(f"/console/responses/{left.id}/lineage"))
    assert re.findall(r'data-node="([^"]+)"', left_page)[:2] == [root.id, left.id]


def test_sessions_filter_sort_and_page(
    console: httpx.Client, server: RunningServer, tenant: TenantKeys
) -> None:
    seed_conversations(server.db_url, tenant.id, 60, turns_each=2)
    chain = seed_chain(server.db_url, tenant.id, 7)
    base = f"/console/tenants/{tenant.id}"
    first = ok(console.get(base))
    assert "61 sessions" in first and "page=2" in first
    by_turns = ok(console.get(base, params={"sort": "turns"}))
    assert by_turns.index(chain.session_id) < by_turns.index("conv_")
    few = ok(console.get(base, params={"min_turns": 3}))
    assert "1 sessions" in few and chain.session_id in few
    assert "0 sessions" in ok(console.get(base, params={"model": "no-such-model"}))
    lossy = ok(console.get(base, params={"lossy": "1", "sort": "lost_tokens"}))
    assert lossy.index(chain.session_id) < lossy.index("conv_")
    assert console.get(base, params={"sort": "nonsense"}).status_code == 400
    assert console.get(base, params={"page": "0"}).status_code == 400
    second = ok(console.get(base, params={"page": 2}))
    assert "← Previous" in second and "Next →" not in second


def test_residency_jobs_and_message_pages_render(console: httpx.Client, tenant: TenantKeys) -> None:
    assert "follows no KV events" in ok(console.get(f"/console/tenants/{tenant.id}/residency"))
    for state in ("queued", "running", "failed"):
        assert f"Background jobs: {state}" in ok(
            console.get("/console/jobs", params={"state": state})
        )
    assert "No recorded Messages turns" in ok(
        console.get(f"/console/tenants/{tenant.id}/message_turns")
    )
    assert console.get("/console/tenants/ten_nope").status_code == 404
    assert console.get("/console/responses/resp_nope").status_code == 404


# -- statements per page ------------------------------------------------------------------------


def test_statements_per_page_do_not_grow_with_rows(
    backend: str, fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    settings = server_settings(fresh_db, sim.url, tmp_path, background_workers=0)
    app = create_app(settings)
    running = ThreadedServer(app).start()
    try:
        statements: list[str] = []
        engine = app.state.services.db.engine.sync_engine
        event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        tenant = create_tenant(fresh_db)
        key = create_admin_key(fresh_db)

        def count(http: httpx.Client, path: str, **params: Any) -> int:
            statements.clear()
            ok(http.get(path, params=params))
            # The background sweep shares the engine; its statements are not the page's.
            return len([s for s in statements if "background_jobs" not in s])

        with log_in(running.url, key) as http:
            seed_conversations(fresh_db, tenant.id, 5)
            small = seed_chain(fresh_db, tenant.id, 5)
            pages = {
                "tenants": ("/console", {}),
                "tenant": (f"/console/tenants/{tenant.id}", {}),
                "timeline": (
                    f"/console/tenants/{tenant.id}/timeline",
                    {"session": small.session_id},
                ),
                "response": (f"/console/responses/{small.response_ids[-1]}", {}),
                "lineage": (f"/console/responses/{small.response_ids[0]}/lineage", {}),
            }
            before = {name: count(http, path, **params) for name, (path, params) in pages.items()}
            seed_conversations(fresh_db, tenant.id, 200)
            big = seed_chain(fresh_db, tenant.id, 45)
            pages["timeline"] = (pages["timeline"][0], {"session": big.session_id})
            pages["response"] = (f"/console/responses/{big.response_ids[-1]}", {})
            pages["lineage"] = (f"/console/responses/{big.response_ids[0]}/lineage", {})
            after = {name: count(http, path, **params) for name, (path, params) in pages.items()}
        assert before == after
        # The tenant page is the largest: login check, tenant, per-model and total stats,
        # two time series, the sessions and their metadata.
        assert max(after.values()) <= 12, after
    finally:
        running.stop()


def test_charts_are_script_free_svg_images_for_logged_in_viewers(
    server: RunningServer, console: httpx.Client, client: OpenAI, sim: SimServer, tenant: TenantKeys
) -> None:
    sim.push(Reply("one"), Reply("two"))
    first = client.responses.create(model=MODEL, input="One")
    sim.state.cache.clear()
    client.responses.create(model=MODEL, input="Two", previous_response_id=first.id)
    page = ok(console.get(f"/console/tenants/{tenant.id}"))
    for name in ("hit_ratio", "lost"):
        path = f"/console/tenants/{tenant.id}/charts/{name}.svg"
        assert f'src="{path}?span=24h"' in page
        answer = console.get(path, params={"span": "24h"})
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "image/svg+xml"
        assert "script-src" not in answer.headers["content-security-policy"]
        assert answer.text.startswith("<svg") or "<svg" in answer.text[:200]
        assert "<script" not in answer.text
        with httpx.Client(base_url=server.url, timeout=20) as stranger:
            assert stranger.get(path).status_code == 404
    # The chart's causes are the page's: one set of numbers.
    table = page.split('id="lost-by-cause"')[1].split("</table>")[0]
    causes = re.findall(r"<tr><td>([a-z_]+)</td>", table)
    assert causes
    svg = console.get(f"/console/tenants/{tenant.id}/charts/lost.svg").text
    assert all(f">{cause}</text>" in svg for cause in causes)
