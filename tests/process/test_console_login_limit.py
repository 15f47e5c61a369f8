"""Console logins hammered with wrong keys, against ``agentic-api serve`` as a process on
loopback, from several client addresses (127.0.0.x): past the limit per address and per
key prefix, a login is answered 429 with ``Retry-After`` (the right key too), other
addresses and keys are not held up, and the limit lifts when the window has passed."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from agentic_api.settings import Settings
from tests.support.console import login_token
from tests.support.processes import Process, process_env
from tests.support.tenants import create_admin_key
from tests.upstream_sim import SimServer

pytestmark = pytest.mark.slow

# The documented defaults: 10 failures per address and per key prefix, in 300 s.
LIMIT = Settings.model_fields["console_login_max_failures"].default
# Short here, so that the test sees the limit lift.
WINDOW_SECONDS = 8
# The admin key prefix key lists show ("sk-agentic-admin-" and 6 characters).
PREFIX_CHARS = 23


@contextmanager
def _from(server: Process, address: str) -> Iterator[httpx.Client]:
    """A browser on ``address`` (a loopback address of its own)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=server.url, transport=transport, timeout=20) as http:
        yield http


def _log_in(http: httpx.Client, key: str) -> httpx.Response:
    form = http.get("/console/login")
    assert form.status_code == 200, form.text
    return http.post(
        "/console/login", data={"admin_key": key, "login_token": login_token(form.text)}
    )


def _wrong_key(prefix: str = "sk-agentic-admin-") -> str:
    return prefix + secrets.token_urlsafe(32)[: 43 - len(prefix) + len("sk-agentic-admin-")]


def _assert_limited(answer: httpx.Response) -> int:
    assert answer.status_code == 429, answer.text
    wait = int(answer.headers["retry-after"])
    assert 1 <= wait <= WINDOW_SECONDS
    assert "Too many failed logins" in answer.text
    assert "agentic_console=" not in answer.headers.get("set-cookie", "")
    return wait


def test_wrong_keys_are_limited_per_address_and_per_key_prefix(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    admin = create_admin_key(fresh_db)
    env = process_env(
        fresh_db, sim.url, tmp_path / "data", console_login_window_seconds=WINDOW_SECONDS
    )
    server = Process(env, "serve", "--workers", "1")
    try:
        server.wait_up()
        # One address hammers wrong keys (each with a prefix of its own).
        with _from(server, "127.0.0.2") as hammer:
            answers = [_log_in(hammer, _wrong_key()) for _ in range(3 * LIMIT)]
            assert [a.status_code for a in answers[:LIMIT]] == [401] * LIMIT
            for answer in answers[LIMIT:]:
                _assert_limited(answer)
            # Limited, the right key is refused too: the limit tells nothing about keys.
            _assert_limited(_log_in(hammer, admin))
        # Another address is not held up by it.
        with _from(server, "127.0.0.3") as other:
            assert _log_in(other, admin).status_code == 303
        # Guesses at the admin key's own prefix, each from a different address.
        prefix = admin[:PREFIX_CHARS]
        for index in range(LIMIT):
            with _from(server, f"127.0.1.{index + 1}") as guesser:
                assert _log_in(guesser, _wrong_key(prefix)).status_code == 401
        with _from(server, "127.0.2.1") as fresh:
            _assert_limited(_log_in(fresh, _wrong_key(prefix)))
            # The key with that prefix waits too, from an address with no failure (until
            # the newest failures, these, leave the window).
            wait = _assert_limited(_log_in(fresh, admin))
            # A key of another prefix is not held up.
            assert _log_in(fresh, _wrong_key()).status_code == 401
        # Once the window has passed, the hammering address may log in again, with the key
        # its prefix's guessers were after.
        time.sleep(wait + 0.5)
        with _from(server, "127.0.0.2") as hammer:
            assert _log_in(hammer, admin).status_code == 303
    finally:
        server.stop()
