"""The console's login through a real TLS-terminating proxy (tests/support/tls_proxy.py:
HTTPS with a self-signed certificate made here, plain HTTP to the server from its own
address, 127.0.0.2). Listed in ``AGENTIC_FORWARDED_ALLOW_IPS``, the proxy's
``X-Forwarded-Proto: https`` is believed: the login form's origin check passes and the
cookies are Secure. Not listed (the default trusts 127.0.0.1 only), the same login is
refused as "form expired", as it was behind every proxy on another address."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.console import login_token
from tests.support.processes import Process, process_env
from tests.support.tenants import create_admin_key
from tests.support.tls_proxy import TlsProxy
from tests.upstream_sim import SimServer

pytestmark = pytest.mark.slow

PROXY_ADDRESS = "127.0.0.2"


@contextmanager
def _behind_proxy(
    fresh_db: str, sim: SimServer, folder: Path, **settings: object
) -> Iterator[tuple[Process, TlsProxy]]:
    server = Process(
        process_env(fresh_db, sim.url, folder / "data", **settings), "serve", "--workers", "1"
    )
    proxy: TlsProxy | None = None
    try:
        server.wait_up()
        assert server.port is not None
        proxy = TlsProxy(folder, ("127.0.0.1", server.port), PROXY_ADDRESS)
        yield server, proxy
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()


def _browser(proxy: TlsProxy) -> httpx.Client:
    # A browser posting a form sends its page's origin.
    return httpx.Client(
        base_url=proxy.url,
        verify=proxy.client_context(),
        headers={"Origin": proxy.url},
        timeout=20,
    )


def test_console_login_through_a_trusted_tls_proxy(
    fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    admin = create_admin_key(fresh_db)
    with (
        _behind_proxy(fresh_db, sim, tmp_path, forwarded_allow_ips=PROXY_ADDRESS) as (_, proxy),
        _browser(proxy) as browser,
    ):
        form = browser.get("/console/login")
        assert form.status_code == 200
        assert "; secure" in form.headers["set-cookie"].lower()
        done = browser.post(
            "/console/login", data={"admin_key": admin, "login_token": login_token(form.text)}
        )
        assert done.status_code == 303, done.text
        assert done.headers["location"] == "/console"
        assert "; secure" in done.headers["set-cookie"].lower()
        # The Secure session cookie goes back over HTTPS: logged in.
        assert browser.get("/console").status_code == 200


def test_an_untrusted_proxy_is_not_believed(fresh_db: str, sim: SimServer, tmp_path: Path) -> None:
    admin = create_admin_key(fresh_db)
    with _behind_proxy(fresh_db, sim, tmp_path) as (_, proxy), _browser(proxy) as browser:
        form = browser.get("/console/login")
        assert "; secure" not in form.headers["set-cookie"].lower()
        refused = browser.post(
            "/console/login", data={"admin_key": admin, "login_token": login_token(form.text)}
        )
        assert refused.status_code == 403
        assert "The form expired" in refused.text
