"""Whether a periodic look at the database may be skipped, from its change mark
(``Database.change_mark``): the background workers' polls, the sweep and the followers
of a stored stream each read the mark before their read transaction, and skip it while
nothing can have changed since the last look that left nothing to do."""

from __future__ import annotations

import time

from agentic_api.storage.sqlite.change_mark import Mark

# A real look at least this often whatever the mark says, so that a mark that stopped
# seeing commits (a database file replaced under the server) delays work, never loses it.
LOOK_AT_LEAST_EVERY_SECONDS = 60.0


class LookGate:
    """A look may be skipped only when the database's change mark equals the one read
    before the last look that left nothing to do, and that look was not long ago
    (``LOOK_AT_LEAST_EVERY_SECONDS``). A database without a mark (None) is always looked
    at."""

    __slots__ = ("_looked_at", "_unchanged_since")

    def __init__(self) -> None:
        self._unchanged_since: Mark | None = None
        self._looked_at = float("-inf")

    def may_skip(self, mark: Mark | None) -> bool:
        if mark is None or mark != self._unchanged_since:
            return False
        return time.monotonic() - self._looked_at < LOOK_AT_LEAST_EVERY_SECONDS

    def looked(self, mark: Mark | None) -> None:
        """After a look that left nothing to do, with the mark read *before* it (a commit
        during the look changes the next mark, so the next poll looks again)."""
        self._unchanged_since = mark
        self._looked_at = time.monotonic()

    def forget(self) -> None:
        """After a look that found work (or failed): the next poll looks."""
        self._unchanged_since = None
