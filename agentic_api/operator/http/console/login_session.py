"""The console's login: a session cookie signed with a key derived from the server
secret, and the CSRF tokens bound to it.

The cookie holds the admin key's *id* (never the key), an expiry and a random nonce,
MACed; every page checks the MAC, the expiry and that the key is still active, so
revoking the admin key ends its console sessions in every process. The CSRF token of a
session is a MAC of its nonce (a synchronizer token the pages embed in each form; an
attacker's page can neither read it nor compute it). The login form has its own token,
bound the same way to a short-lived pre-login cookie, so a login cannot be forged either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SESSION_COOKIE = "agentic_console"
LOGIN_COOKIE = "agentic_console_login"
LOGIN_SECONDS = 600
# Domain separation: these MACs can never equal a cache salt or any other use of the
# server secret.
_KEY_LABEL = b"agentic-api console session v1"


@dataclass(frozen=True)
class ConsoleLogin:
    key_id: str
    expires: int
    nonce: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SessionSigner:
    def __init__(self, server_secret: bytes) -> None:
        self._key = hmac.new(server_secret, _KEY_LABEL, hashlib.sha256).digest()

    def _mac(self, purpose: str, *parts: str) -> str:
        message = "\0".join((purpose, *parts)).encode()
        return _b64(hmac.new(self._key, message, hashlib.sha256).digest())

    # -- the session ------------------------------------------------------------------

    def issue(self, key_id: str, *, now: int, lifetime: int) -> str:
        expires = now + lifetime
        nonce = _b64(secrets.token_bytes(18))
        mac = self._mac("session", key_id, str(expires), nonce)
        return f"{key_id}.{expires}.{nonce}.{mac}"

    def read(self, value: str | None, *, now: int) -> ConsoleLogin | None:
        """The login a cookie proves, or None (absent, forged, altered or expired)."""
        if not value:
            return None
        parts = value.split(".")
        if len(parts) != 4:
            return None
        key_id, expires, nonce, mac = parts
        if not hmac.compare_digest(mac, self._mac("session", key_id, expires, nonce)):
            return None
        if not expires.isdigit() or int(expires) <= now:
            return None
        return ConsoleLogin(key_id, int(expires), nonce)

    def csrf_token(self, login: ConsoleLogin) -> str:
        return self._mac("csrf", login.nonce)

    def csrf_ok(self, login: ConsoleLogin, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token, self.csrf_token(login))

    # -- the login form -----------------------------------------------------------------

    def login_nonce(self, *, now: int) -> str:
        """The pre-login cookie's value: a nonce and when it stops counting."""
        nonce = _b64(secrets.token_bytes(18))
        expires = now + LOGIN_SECONDS
        return f"{expires}.{nonce}.{self._mac('login-cookie', str(expires), nonce)}"

    def login_token(self, cookie: str) -> str:
        return self._mac("login-form", cookie)

    def login_ok(self, cookie: str | None, token: str | None, *, now: int) -> bool:
        if not cookie or token is None:
            return False
        parts = cookie.split(".")
        if len(parts) != 3:
            return False
        expires, nonce, mac = parts
        if not hmac.compare_digest(mac, self._mac("login-cookie", expires, nonce)):
            return False
        if not expires.isdigit() or int(expires) <= now:
            return False
        return hmac.compare_digest(token, self.login_token(cookie))
