"""Recently verified histories, kept in this process so that a continuation of a response
it just committed (or rehydrated) need not read and verify that response's items again.

What is kept for a response is exactly its model-visible history (the bytes the model
saw, then its output), under the prefix digest the commit stored for it. A continuation
still reads its parent's row every time — that is what says the parent exists, belongs
to the caller's tenant, is not deleted and is continuable — and uses the kept history
only if the row's digest and item count are the ones it was kept under; otherwise (or
after eviction, or in another process) it rehydrates from storage as before, fail closed.

Only ``previous_response_id`` chains are kept: a chain that began in a conversation
depends on the conversation's items as they are now (items deleted there make it
uncontinuable, ``turns/prepare/history.py``), which this process cannot see change.

Entries share their items (a child's history is its parent's plus a few items), so the
memory held is about the size of the histories' distinct items; the budget charges every
entry its whole history, an upper bound on what it keeps alive.

With several workers (or replicas) a chain's turns land on different processes, so the
parent is often one this process did not commit while an earlier turn of the same session
is still kept here. ``ancestor_for`` names that turn (the parent's parent, or the
session's latest kept turn): the continuation then reads only
the turns after it and verifies them by extending its digest
(``turns/prepare/history.py:load_history_since``) instead of reading the whole chain.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from agentic_api.metrics import HISTORY_CACHE_LOOKUPS
from agentic_api.wire.items import Item
from lineage import IdKind, id_kind


@dataclass(frozen=True)
class _Kept:
    digest: str
    items: tuple[Item, ...]
    charged_bytes: int
    session_id: str


@dataclass(frozen=True)
class KeptAncestor:
    """A kept history that may be an ancestor of a turn this process did not see."""

    response_id: str
    digest: str
    items: tuple[Item, ...]


class VerifiedHistories:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._charged = 0
        # Each session's most recently kept turn (the one a continuation elsewhere most
        # likely descends from).
        self._latest: dict[str, str] = {}

    def get(
        self, response_id: str, *, digest: str | None, item_count: int, session_id: str
    ) -> tuple[Item, ...] | None:
        """The history kept for ``response_id`` if it is the one its stored row describes."""
        kept = self._kept.get(response_id)
        if (
            kept is None
            or digest is None
            or kept.digest != digest
            or len(kept.items) != item_count
            or not _keepable(session_id)
        ):
            HISTORY_CACHE_LOOKUPS.labels("miss").inc()
            return None
        self._kept.move_to_end(response_id)
        HISTORY_CACHE_LOOKUPS.labels("hit").inc()
        return kept.items

    def keep(
        self, response_id: str, *, digest: str | None, session_id: str, items: Sequence[Item]
    ) -> None:
        """Keeps a history that was just committed or verified under ``digest``."""
        if digest is None or not _keepable(session_id) or self.budget_bytes <= 0:
            return
        kept = _Kept(digest, tuple(items), sum(len(item.data) for item in items), session_id)
        if kept.charged_bytes > self.budget_bytes:
            return
        self.forget(response_id)
        self._kept[response_id] = kept
        self._charged += kept.charged_bytes
        self._latest[session_id] = response_id
        while self._charged > self.budget_bytes:
            self.forget(next(iter(self._kept)))

    def ancestor_for(
        self, previous_id: str | None, session_id: str, *, below: int
    ) -> KeptAncestor | None:
        """A kept history the turn with ``previous_id`` as its parent and ``below`` items
        may descend from: that parent's own if kept (certainly an ancestor), else the
        session's most recently kept one if it is shorter (whether it is an ancestor is
        for the chain walk to say: the session may have branched)."""
        # (Chains rooted in a conversation are never kept, so never offered: their history
        # is the conversation's items as they are now, which only a whole read can see.)
        for response_id in (previous_id, self._latest.get(session_id)):
            kept = self._kept.get(response_id) if response_id else None
            if kept is not None and response_id is not None and len(kept.items) < below:
                return KeptAncestor(response_id, kept.digest, kept.items)
        return None

    def extended(self) -> None:
        """Counts a miss that read only the turns after an ancestor kept here."""
        HISTORY_CACHE_LOOKUPS.labels("extended").inc()

    def forget(self, response_id: str) -> None:
        kept = self._kept.pop(response_id, None)
        if kept is not None:
            self._charged -= kept.charged_bytes
            if self._latest.get(kept.session_id) == response_id:
                del self._latest[kept.session_id]

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def charged_bytes(self) -> int:
        return self._charged


def _keepable(session_id: str) -> bool:
    return id_kind(session_id) is not IdKind.CONVERSATION
