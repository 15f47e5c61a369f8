"""SQLAlchemy Core statements compiled once, for running on a driver connection directly.

What SQLAlchemy's execution layer does per statement — compile-cache lookup, execution
context, events, result wrapping — costs far more than a small statement itself (see
``storage/turn_store/store.py``). A ``CompiledStatement`` keeps what matters of it: the SQL for
one dialect, and each value's conversion by its column type's implementation for that
dialect (SQLite's DATETIME text, the JSON encoder configured on the engine, PostgreSQL's
json), so rows written or read this way are the ones SQLAlchemy would write or read.

The rows themselves (which columns, which values) come from ``storage/turn_rows.py``, as
the repositories' do; what a store runs comes back as named parts (``TurnInsert``), so no
store needs to know the order of statements or recognize one by its SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ClauseElement, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from agentic_api.storage.models import Response, ResponseEvent, ResponseItem, TokenArtifactRow
from agentic_api.storage.turn_rows import (
    ARTIFACT_KEYS,
    EVENT_COLUMNS,
    ITEM_COLUMNS,
    LIVE_CHECKPOINT,
    EventJson,
    NewItem,
    artifact_values,
    event_values,
    item_values,
    response_values,
)

_Processor = Callable[[Any], Any] | None


class CompiledStatement:
    """A Core statement as SQL for one dialect, with the bind and result conversions of
    its columns' types."""

    def __init__(self, statement: ClauseElement, dialect: Dialect, **compile_kw: Any) -> None:
        compiled = statement.compile(dialect=dialect, **compile_kw)
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        # The statement's parameters by name, in the order the SQL takes them.
        self.names: tuple[str, ...] = tuple(compiled.positiontup or [])
        # Through each type's implementation for this dialect (SQLite's DATETIME, JSON), as
        # SQLAlchemy itself converts values.
        self._binds: list[_Processor] = [
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in self.names
        ]
        columns = getattr(statement, "selected_columns", ())
        self.keys: list[str] = [column.key for column in columns]
        self._results: list[_Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(
            values[name] if bind is None else bind(values[name])
            for name, bind in zip(self.names, self._binds, strict=True)
        )

    def row(self, raw: Sequence[Any]) -> dict[str, Any]:
        return {
            key: value if result is None else result(value)
            for key, value, result in zip(self.keys, raw, self._results, strict=True)
        }


@dataclass(frozen=True)
class Statement:
    """One statement with one set of parameters (in the order its SQL takes them)."""

    sql: str
    parameters: tuple[Any, ...]


@dataclass(frozen=True)
class RowInsert:
    """One INSERT for many rows (``executemany``): each row's parameters in the order of
    ``columns``, which is the order the SQL takes them."""

    sql: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def column(self, key: str) -> list[Any]:
        """One column's (converted) values, a value per row."""
        index = self.columns.index(key)
        return [row[index] for row in self.rows]


@dataclass(frozen=True)
class TurnInsert:
    """What storing a turn runs: its response row, then its items and its events (either
    may have no rows, and is then not run), then its token artifact if it has one."""

    response: Statement
    items: RowInsert
    events: RowInsert
    artifact: Statement | None = None

    @property
    def statement_count(self) -> int:
        return 1 + bool(self.items.rows) + bool(self.events.rows) + (self.artifact is not None)


class TurnStatements:
    """The turn store's statements (``storage/turn_store/store.py``) compiled for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._checkpoint = CompiledStatement(LIVE_CHECKPOINT, dialect)
        self._item_insert = CompiledStatement(
            insert(ResponseItem), dialect, column_keys=list(ITEM_COLUMNS)
        )
        self._event_insert = CompiledStatement(
            insert(ResponseEvent), dialect, column_keys=list(EVENT_COLUMNS)
        )
        self._artifact_insert = CompiledStatement(
            insert(TokenArtifactRow), dialect, column_keys=list(ARTIFACT_KEYS)
        )
        # One per set of columns a row has set (the others take their defaults).
        self._response_inserts: dict[frozenset[str], CompiledStatement] = {}

    def checkpoint(self, tenant_id: str, response_id: str) -> Statement:
        values = {"tenant_id": tenant_id, "response_id": response_id}
        return Statement(self._checkpoint.sql, self._checkpoint.parameters(values))

    def checkpoint_row(self, raw: Sequence[Any]) -> Response:
        return Response(**self._checkpoint.row(raw))

    def insert(
        self,
        row: Response,
        items: Sequence[NewItem],
        events: Sequence[EventJson],
        artifact: TokenArtifactRow | None = None,
    ) -> TurnInsert:
        """What ``ResponseRepository.insert``, ``add_events`` and
        ``TokenArtifactRepository.insert`` would run, in order."""
        values = response_values(row)
        response_insert = self.response_insert(frozenset(values))
        return TurnInsert(
            response=Statement(response_insert.sql, response_insert.parameters(values)),
            items=_rows(self._item_insert, item_values(row.id, row.tenant_id, 0, items)),
            events=_rows(self._event_insert, event_values(row.id, events)),
            artifact=None if artifact is None else self._artifact(artifact),
        )

    def _artifact(self, artifact: TokenArtifactRow) -> Statement:
        return Statement(
            self._artifact_insert.sql, self._artifact_insert.parameters(artifact_values(artifact))
        )

    def response_insert(self, columns: frozenset[str]) -> CompiledStatement:
        """The ``responses`` INSERT setting exactly ``columns``."""
        statement = self._response_inserts.get(columns)
        if statement is None:
            statement = CompiledStatement(
                insert(Response), self._dialect, column_keys=sorted(columns)
            )
            self._response_inserts[columns] = statement
        return statement


def _rows(statement: CompiledStatement, rows: Sequence[Mapping[str, Any]]) -> RowInsert:
    return RowInsert(
        statement.sql, statement.names, [statement.parameters(values) for values in rows]
    )
