"""Several turns' rows written in one SQLite transaction, each table's rows in as few
statements as its placeholders allow (``INSERT ... VALUES (...), (...), ...``).

Why few statements rather than ``executemany``: the SQLite turn store writes on its own
thread, and Python's ``sqlite3`` gives up the GIL around every prepare and every step. On
a loaded server the event loop's thread holds the GIL most of the time, so the writer
waits for it after each one (up to the interpreter's switch interval, 5 ms): with 48
streams ending together a single turn's insert took 40 ms p50 and 105 ms p95 to come
back (timed around ``db.turns.insert``, docs/benchmarks/streaming/README.md), nearly all
of it waiting. A statement per table for a whole group of turns waits a handful of times
for all of them.

The rows and their values are the compiled single-row statements' own
(``storage/turn_store/statements.py``): only the ``VALUES`` group is repeated.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from agentic_api.storage.turn_store.statements import TurnInsert


def write_grouped(cursor: sqlite3.Cursor, turns: Sequence[TurnInsert], max_parameters: int) -> int:
    """Inserts every row of ``turns`` inside the transaction the caller began: responses
    first (the items, events and artifacts refer to them), then each table's rows.
    Returns the statements sent."""
    tables: dict[str, list[tuple[Any, ...]]] = {}

    def add(sql: str, rows: Iterable[tuple[Any, ...]]) -> None:
        tables.setdefault(sql, []).extend(rows)

    for turn in turns:
        # A response INSERT per set of columns its row sets: most groups have one.
        add(turn.response.sql, [turn.response.parameters])
    for turn in turns:
        add(turn.items.sql, turn.items.rows)
    for turn in turns:
        add(turn.events.sql, turn.events.rows)
    for turn in turns:
        if turn.artifact is not None:
            add(turn.artifact.sql, [turn.artifact.parameters])
    sent = 0
    for sql, rows in tables.items():
        if not rows:
            continue
        per_statement = max(1, max_parameters // len(rows[0]))
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            cursor.execute(multi_row(sql, len(chunk)), [value for row in chunk for value in row])
            sent += 1
    return sent


@lru_cache(maxsize=512)
def multi_row(sql: str, rows: int) -> str:
    """``sql``, a single-row ``INSERT ... VALUES (...)``, taking ``rows`` rows."""
    head, separator, group = sql.rpartition(" VALUES ")
    if not separator or not (group.startswith("(") and group.endswith(")")):
        raise ValueError(f"not a single-row INSERT: {sql}")
    return head + separator + ", ".join([group] * rows)
