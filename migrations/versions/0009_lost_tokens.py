"""responses: each turn's lost tokens in columns of their own

``lost_tokens`` (the total) and ``lost_by_cause`` (JSONB on PostgreSQL) copy the ``lost``
part of the stored token account, so the console sums and sorts on plain columns. Reading
``token_account -> 'lost'`` in SQL on PostgreSQL fails for the whole statement once any
account holds a NUL in a decoded divergence piece (``json`` keeps ``\\u0000``, which cannot
become text), so existing rows are filled here from the account's JSON text, parsed in
Python, never by PostgreSQL's JSON operators.

Revision ID: 0009_lost_tokens
Revises: 0008_console_pages
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009_lost_tokens"
down_revision: str | None = "0008_console_pages"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Rows read and written per round trip while filling the new columns.
BATCH = 1000


def upgrade() -> None:
    op.add_column("responses", sa.Column("lost_tokens", sa.BigInteger(), nullable=True))
    op.add_column(
        "responses",
        sa.Column(
            "lost_by_cause",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
        ),
    )
    _fill_from_accounts()


def _fill_from_accounts() -> None:
    bind = op.get_bind()
    as_text = (
        "CAST(token_account AS TEXT)" if bind.dialect.name == "postgresql" else "token_account"
    )
    select = sa.text(
        f"SELECT id, {as_text} FROM responses "
        "WHERE token_account IS NOT NULL AND id > :after ORDER BY id LIMIT :batch"
    )
    update = sa.text(
        "UPDATE responses SET lost_tokens = :total, lost_by_cause = :by_cause WHERE id = :id"
    ).bindparams(
        sa.bindparam("by_cause", type_=sa.JSON().with_variant(postgresql.JSONB(), "postgresql"))
    )
    after = ""
    while True:
        rows = bind.execute(select, {"after": after, "batch": BATCH}).all()
        if not rows:
            return
        changes = []
        for response_id, document in rows:
            account = json.loads(document) if isinstance(document, str) else document
            lost = account.get("lost") if isinstance(account, dict) else None
            if isinstance(lost, dict):
                by_cause = {str(k): int(v) for k, v in lost.items()}
                changes.append(
                    {"id": response_id, "total": sum(by_cause.values()), "by_cause": by_cause}
                )
        if changes:
            bind.execute(update, changes)
        after = rows[-1][0]


def downgrade() -> None:
    op.drop_column("responses", "lost_by_cause")
    op.drop_column("responses", "lost_tokens")
