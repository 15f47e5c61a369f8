"""Whether anyone committed to a SQLite database since an earlier look, for the price
of one pragma on the event loop's thread.

``PRAGMA data_version`` answers with a number that changes whenever another connection
(of this process or any other) has committed to the database since this connection last
asked. An idle background worker and the sweep ask it before their read transactions
(~2 ms of CPU each on a small machine, and most of an idle server's CPU): while it has not
changed, nothing was enqueued, claimed, renewed or finished anywhere, and the look would
find what the last one found. The connection asking never writes, so its own commits
cannot hide anyone else's.
"""

from __future__ import annotations

import os
import sqlite3

# (Which connection asked, and what it answered: data_version's values mean something only
# between two answers of one connection, so a reopened one must never match an old mark.)
Mark = tuple[int, int]


class ChangeMark:
    """One read-only connection, opened on first use and used only on the loop's thread
    (a pragma takes microseconds and never waits: busy timeout 0)."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._connection: sqlite3.Connection | None = None
        self._opened = 0

    def read(self) -> Mark | None:
        """The database's current mark, or None when it could not be read this time (a
        lock held through recovery, no file yet): the caller then looks, as it would
        without a mark."""
        try:
            if self._connection is None:
                if not os.path.exists(self._database):
                    # (Connecting would create an empty database file.)
                    return None
                self._connection = _connect(self._database)
                self._opened += 1
            row = self._connection.execute("PRAGMA data_version").fetchone()
        except sqlite3.Error:
            self.close()
            return None
        return self._opened, int(row[0])

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _connect(database: str) -> sqlite3.Connection:
    # Autocommit: no read transaction stays open between two looks (one open would pin the
    # mark, and the WAL, where they were).
    connection = sqlite3.connect(database, isolation_level=None, timeout=0, check_same_thread=False)
    connection.execute("PRAGMA query_only=ON")
    return connection
