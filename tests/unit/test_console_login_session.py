"""The console's signed login cookie and CSRF tokens: what a forged, altered, expired or
foreign cookie proves (nothing), and that tokens are bound to their session."""

from __future__ import annotations

from agentic_api.operator.http.console.login_session import LOGIN_SECONDS, SessionSigner

SECRET = b"s" * 32
NOW = 1_800_000_000


def test_a_cookie_proves_its_key_until_it_expires() -> None:
    sign = SessionSigner(SECRET)
    cookie = sign.issue("adk_1", now=NOW, lifetime=60)
    login = sign.read(cookie, now=NOW + 59)
    assert login is not None and login.key_id == "adk_1"
    assert sign.read(cookie, now=NOW + 60) is None


def test_altered_foreign_or_malformed_cookies_prove_nothing() -> None:
    sign = SessionSigner(SECRET)
    cookie = sign.issue("adk_1", now=NOW, lifetime=60)
    key_id, expires, nonce, mac = cookie.split(".")
    assert sign.read(f"adk_2.{expires}.{nonce}.{mac}", now=NOW) is None
    assert sign.read(f"{key_id}.{int(expires) + 3600}.{nonce}.{mac}", now=NOW) is None
    assert sign.read(cookie, now=NOW) is not None
    assert SessionSigner(b"another secret").read(cookie, now=NOW) is None
    for junk in ("", "a.b.c", "a.b.c.d.e", "adk_1.soon.nonce.mac"):
        assert sign.read(junk, now=NOW) is None


def test_csrf_tokens_are_bound_to_their_session() -> None:
    sign = SessionSigner(SECRET)
    first = sign.read(sign.issue("adk_1", now=NOW, lifetime=60), now=NOW)
    second = sign.read(sign.issue("adk_1", now=NOW, lifetime=60), now=NOW)
    assert first is not None and second is not None
    assert sign.csrf_ok(first, sign.csrf_token(first))
    assert not sign.csrf_ok(first, sign.csrf_token(second))
    assert not sign.csrf_ok(first, None)
    assert not sign.csrf_ok(first, "")


def test_the_login_token_needs_its_own_fresh_pre_login_cookie() -> None:
    sign = SessionSigner(SECRET)
    cookie = sign.login_nonce(now=NOW)
    token = sign.login_token(cookie)
    assert sign.login_ok(cookie, token, now=NOW)
    assert not sign.login_ok(cookie, token, now=NOW + LOGIN_SECONDS)
    other = sign.login_nonce(now=NOW)
    assert not sign.login_ok(other, token, now=NOW)
    assert not sign.login_ok(None, token, now=NOW)
    assert not sign.login_ok(cookie, None, now=NOW)
