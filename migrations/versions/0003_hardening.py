"""JSON documents as JSON text on PostgreSQL (NUL round-trips)

PostgreSQL's JSONB cannot hold the escape ``\\u0000``, so a NUL character in what the
client sent or the model said made a turn's commit fail after the model had run. The
``json`` type keeps the document's text as given: it parses back to exactly the stored
value. Only documents read whole change; conversation metadata, which admin queries
filter on, stays JSONB (its values are refused NUL up front). SQLite stores JSON as
text already: nothing changes there.

Revision ID: 0003_hardening
Revises: 0004_token_artifacts
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003_hardening"
down_revision: str | None = "0004_token_artifacts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DOCUMENTS = (
    ("responses", "body"),
    ("responses", "request"),
    ("responses", "error"),
    ("responses", "fingerprint"),
    ("responses", "fingerprint_changes"),
    ("responses", "token_account"),
    ("idempotency_keys", "body"),
    ("token_artifacts", "output_types"),
)


def _retype(target: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _DOCUMENTS:
        op.execute(
            f'ALTER TABLE {table} ALTER COLUMN "{column}" TYPE {target} '
            f'USING "{column}"::text::{target}'
        )


def upgrade() -> None:
    _retype("json")


def downgrade() -> None:
    # Fails on a document holding \u0000, which JSONB cannot represent.
    _retype("jsonb")
