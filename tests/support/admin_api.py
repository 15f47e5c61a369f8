"""The admin API of a running server, as tests read it: with a fresh admin key, every
answer they ask for must be a 200, and its JSON is what they assert on."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.tenants import create_admin_key


class AdminApi:
    def __init__(self, server_url: str, db_url: str, *, timeout: float = 60) -> None:
        self.http = httpx.Client(
            base_url=f"{server_url}/admin/v1",
            headers={"Authorization": f"Bearer {create_admin_key(db_url)}"},
            timeout=timeout,
        )

    def get(self, path: str) -> Any:
        answer = self.http.get(path)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def token_account(self, response_id: str) -> dict[str, Any]:
        """The whole answer of ``/responses/{id}/token_account``."""
        return dict(self.get(f"/responses/{response_id}/token_account"))

    def account(self, response_id: str) -> dict[str, Any]:
        """A stored turn's token account (every turn on a real vLLM has one)."""
        account = self.token_account(response_id)["account"]
        assert account is not None, "every stored turn on this upstream has an account"
        return dict(account)

    def decoded(self, response_id: str) -> dict[str, Any]:
        """The account once its divergence is decoded (done after the commit)."""
        deadline = time.monotonic() + 30
        account = self.account(response_id)
        while account["divergence"]["parent_pieces"] is None and time.monotonic() < deadline:
            time.sleep(0.2)
            account = self.account(response_id)
        return account

    def ancestors(self, response_id: str) -> list[str]:
        return [turn["id"] for turn in self.get(f"/responses/{response_id}/lineage")["ancestors"]]

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> AdminApi:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
