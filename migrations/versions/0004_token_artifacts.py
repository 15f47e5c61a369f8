"""token artifacts: each turn's exact token ids, and its reuse account

Revision ID: 0004_token_artifacts
Revises: 0005_messages_turns
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004_token_artifacts"
down_revision: str | None = "0005_messages_turns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "token_artifacts",
        sa.Column("response_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("tokenizer", sa.String(length=200), nullable=False),
        sa.Column("fingerprint_digest", sa.String(length=64), nullable=False),
        sa.Column("salt_epoch", sa.Integer(), nullable=False),
        sa.Column("encoding", sa.String(length=32), nullable=False),
        sa.Column("prompt_count", sa.Integer(), nullable=False),
        sa.Column("output_count", sa.Integer(), nullable=False),
        sa.Column("prompt_ids", sa.LargeBinary(), nullable=False),
        sa.Column("output_ids", sa.LargeBinary(), nullable=False),
        sa.Column("output_types", _JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["response_id"],
            ["responses.id"],
            name=op.f("fk_token_artifacts_response_id_responses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("response_id", name=op.f("pk_token_artifacts")),
    )
    with op.batch_alter_table("token_artifacts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_token_artifacts_created_at"), ["created_at"], unique=False
        )
    with op.batch_alter_table("responses", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token_account", _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("responses", schema=None) as batch_op:
        batch_op.drop_column("token_account")
    with op.batch_alter_table("token_artifacts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_token_artifacts_created_at"))
    op.drop_table("token_artifacts")
