"""Column types that behave the same on SQLite and PostgreSQL, and how their JSON is
written and read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import JSON, DateTime
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps; SQLite drops the zone, so we put it back on read."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# JSON documents stored and read as a whole: JSON text on both databases. PostgreSQL's
# json type keeps the text as given, so a NUL (the escape \u0000) that the client sent or
# the model said round-trips; JSONB refuses it (migration 0003_hardening).
JsonDocument = JSON()
# Documents the database filters on (conversation metadata, in admin queries): JSONB on
# PostgreSQL; their strings are refused NUL before anything is stored (wire/metadata.py).
QueryableJsonDocument = JSON().with_variant(JSONB(), "postgresql")


def dump_json(value: Any) -> str:
    return orjson.dumps(value).decode()


# The engines' codec for JSON columns: orjson, several times faster than the stdlib on every
# turn's response body, and it refuses NaN rather than writing invalid JSON.
JSON_CODEC: dict[str, Any] = {"json_serializer": dump_json, "json_deserializer": orjson.loads}


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_unix(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


Json = dict[str, Any]
