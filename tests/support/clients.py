"""Official SDK clients for tests, closed when the test ends (an unclosed socket is a
ResourceWarning, and warnings are errors in this suite)."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

_open: list[OpenAI] = []


def openai_client(base_url: str, api_key: str, **options: Any) -> OpenAI:
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, **options)
    _open.append(client)
    return client


def close_all() -> None:
    while _open:
        _open.pop().close()
