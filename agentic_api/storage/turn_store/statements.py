"""SQLAlchemy Core statements compiled once, for running on a driver connection directly.

What SQLAlchemy's execution layer does per statement — compile-cache lookup, execution
context, events, result wrapping — costs far more than a small statement itself (see
``storage/turn_store/store.py``). A ``CompiledStatement`` keeps what matters of it: the SQL for
one dialect, and each value's conversion by its column type's implementation for that
dialect (SQLite's DATETIME text, the JSON encoder configured on the engine, PostgreSQL's
json), so rows written or read this way are the ones SQLAlchemy would write or read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ClauseElement, insert
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

from agentic_api.storage.models import Response, ResponseEvent, ResponseItem, TokenArtifactRow
from agentic_api.storage.responses import LIVE_CHECKPOINT, RESPONSE_COLUMN_KEYS, NewItem
from agentic_api.storage.token_artifacts import ARTIFACT_KEYS, artifact_values

_Processor = Callable[[Any], Any] | None

ITEM_KEYS = ("response_id", "position", "tenant_id", "item_id", "role", "type", "data")
EVENT_KEYS = ("response_id", "sequence_number", "data")


class CompiledStatement:
    """A Core statement as SQL for one dialect, with the bind and result conversions of
    its columns' types."""

    def __init__(self, statement: ClauseElement, dialect: Dialect, **compile_kw: Any) -> None:
        compiled = statement.compile(dialect=dialect, **compile_kw)
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        self._names: list[str] = list(compiled.positiontup or [])
        # Through each type's implementation for this dialect (SQLite's DATETIME, JSON), as
        # SQLAlchemy itself converts values.
        self._binds: list[_Processor] = [
            compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in self._names
        ]
        columns = getattr(statement, "selected_columns", ())
        self.keys: list[str] = [column.key for column in columns]
        self._results: list[_Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(
            values[name] if bind is None else bind(values[name])
            for name, bind in zip(self._names, self._binds, strict=True)
        )

    def row(self, raw: Sequence[Any]) -> dict[str, Any]:
        return {
            key: value if result is None else result(value)
            for key, value, result in zip(self.keys, raw, self._results, strict=True)
        }


@dataclass(frozen=True)
class Batch:
    """One statement to run: with one set of parameters, or (``many``) with several."""

    sql: str
    parameters: Any
    many: bool


class TurnStatements:
    """The turn store's statements (``storage/turn_store/store.py``) compiled for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._checkpoint = CompiledStatement(LIVE_CHECKPOINT, dialect)
        self._item_insert = CompiledStatement(
            insert(ResponseItem), dialect, column_keys=list(ITEM_KEYS)
        )
        self._event_insert = CompiledStatement(
            insert(ResponseEvent), dialect, column_keys=list(EVENT_KEYS)
        )
        self._artifact_insert = CompiledStatement(
            insert(TokenArtifactRow), dialect, column_keys=list(ARTIFACT_KEYS)
        )
        # One per set of columns a row has set (the others take their defaults).
        self._row_inserts: dict[frozenset[str], CompiledStatement] = {}

    def checkpoint(self, tenant_id: str, response_id: str) -> Batch:
        values = {"tenant_id": tenant_id, "response_id": response_id}
        return Batch(self._checkpoint.sql, self._checkpoint.parameters(values), many=False)

    def checkpoint_row(self, raw: Sequence[Any]) -> Response:
        return Response(**self._checkpoint.row(raw))

    def insert(
        self,
        row: Response,
        items: Sequence[NewItem],
        events: Sequence[tuple[int, str]],
        artifact: TokenArtifactRow | None = None,
    ) -> list[Batch]:
        """What ``ResponseRepository.insert``, ``add_events`` and
        ``TokenArtifactRepository.insert`` would run, in order."""
        values = {key: value for key, value in vars(row).items() if key in RESPONSE_COLUMN_KEYS}
        row_insert = self._row_insert(frozenset(values))
        batches = [Batch(row_insert.sql, row_insert.parameters(values), many=False)]
        if items:
            item_rows = [
                self._item_insert.parameters(
                    {
                        "response_id": row.id,
                        "position": position,
                        "tenant_id": row.tenant_id,
                        "item_id": item.item_id,
                        "role": item.role,
                        "type": item.type,
                        "data": item.data,
                    }
                )
                for position, item in enumerate(items)
            ]
            batches.append(Batch(self._item_insert.sql, item_rows, many=True))
        if events:
            event_rows = [
                self._event_insert.parameters(
                    {"response_id": row.id, "sequence_number": number, "data": data}
                )
                for number, data in events
            ]
            batches.append(Batch(self._event_insert.sql, event_rows, many=True))
        if artifact is not None:
            batches.append(self.artifact_insert(artifact))
        return batches

    def artifact_insert(self, artifact: TokenArtifactRow) -> Batch:
        parameters = self._artifact_insert.parameters(artifact_values(artifact))
        return Batch(self._artifact_insert.sql, parameters, many=False)

    def artifact_binds(self, artifact: TokenArtifactRow) -> tuple[Any, ...]:
        """The artifact's values as its insert binds them, in ``ARTIFACT_KEYS`` order."""
        return self._artifact_insert.parameters(artifact_values(artifact))

    def _row_insert(self, keys: frozenset[str]) -> CompiledStatement:
        statement = self._row_inserts.get(keys)
        if statement is None:
            statement = CompiledStatement(insert(Response), self._dialect, column_keys=sorted(keys))
            self._row_inserts[keys] = statement
        return statement
