"""A console user over real HTTP (httpx with its cookie jar): log in through the form,
read pages, post the forms they carry, and read the numbers a page shows
(``data-turn`` rows and ``data-field`` cells) back out of its HTML."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser

import httpx

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_VOID = {"br", "hr", "img", "input", "link", "meta", "source", "wbr"}
_LOGIN = re.compile(r'name="login_token" value="([^"]+)"')


def login_token(html: str) -> str:
    found = _LOGIN.search(html)
    assert found, "the login form carries no login token"
    return found.group(1)


def csrf_token(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


@contextmanager
def log_in(base_url: str, admin_key: str) -> Iterator[httpx.Client]:
    """A client holding a console session made through the login form."""
    with httpx.Client(base_url=base_url, timeout=20) as http:
        form = http.get("/console/login")
        assert form.status_code == 200, form.text
        done = http.post(
            "/console/login",
            data={"admin_key": admin_key, "login_token": login_token(form.text)},
        )
        assert done.status_code == 303, done.text
        assert done.headers["location"] == "/console"
        yield http


class _Cells(HTMLParser):
    """Collects, per ``data-turn`` (or ``data-node``) row, the text of its ``data-field``
    cells; fields outside any row go under ""."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self._row = ""
        self._field: list[tuple[str, int]] = []
        self._depth = 0
        self._row_depth = -1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        self._depth += 1
        values = dict(attrs)
        if values.get("data-turn"):
            self._row = values["data-turn"] or ""
            self._row_depth = self._depth
        if values.get("data-field"):
            self._field.append((values["data-field"] or "", self._depth))
            self.rows.setdefault(self._row, {}).setdefault(self._field[-1][0], "")

    def handle_endtag(self, tag: str) -> None:
        if self._field and self._field[-1][1] == self._depth:
            self._field.pop()
        if self._depth == self._row_depth:
            self._row, self._row_depth = "", -1
        self._depth -= 1

    def handle_data(self, data: str) -> None:
        for field, _ in self._field:
            cell = self.rows.setdefault(self._row, {})
            cell[field] = (cell.get(field, "") + " " + data.strip()).strip()


def cells(html: str) -> dict[str, dict[str, str]]:
    parser = _Cells()
    parser.feed(html)
    return parser.rows


def number(value: int | None) -> str:
    """A number as the pages print it."""
    return "—" if value is None else f"{value:,}"
