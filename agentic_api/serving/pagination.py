"""The one pagination rule: a page of stored rows, and (for response input items and
conversation items) that page as an OpenAI list object.

Repositories are asked for ``limit + 1`` rows: the extra row, never shown, is how a page
knows there is more after it without a second count query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import orjson

from agentic_api.wire.conversations import item_list
from agentic_api.wire.listing import present_item
from agentic_api.wire.reasoning_seal import sealed_reasoning

T = TypeVar("T")


def page_of(rows: Sequence[T], limit: int) -> tuple[list[T], bool]:
    """The first ``limit`` of ``rows`` (read with ``limit + 1``), and whether there is more."""
    return list(rows[:limit]), len(rows) > limit


class StoredItemRow(Protocol):
    """A stored item as repositories return it: its id and its JSON."""

    @property
    def item_id(self) -> str: ...

    @property
    def data(self) -> str: ...


def shown_item(row: StoredItemRow, *, sealed: bool = False) -> dict[str, Any]:
    """A stored item as listed; ``sealed`` (``include: reasoning.encrypted_content``):
    reasoning items carry their content sealed (wire/reasoning_seal.py)."""
    shown = present_item(orjson.loads(row.data))
    return sealed_reasoning(shown) if sealed else shown


def item_page(rows: Sequence[StoredItemRow], limit: int, *, sealed: bool = False) -> dict[str, Any]:
    """The list object of the first ``limit`` of ``rows`` (read with ``limit + 1``)."""
    page, more = page_of(rows, limit)
    shown = [shown_item(r, sealed=sealed) for r in page]
    return item_list(shown, [r.item_id for r in page], has_more=more)
