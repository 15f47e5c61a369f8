"""message turns: optional records of Anthropic Messages API traffic

Revision ID: 0005_messages_turns
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_messages_turns"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "message_turns",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("session_source", sa.String(length=32), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("stop_reason", sa.String(length=32), nullable=True),
        sa.Column("message_id", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("cache_creation_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_message_turns_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_message_turns")),
    )
    with op.batch_alter_table("message_turns", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_message_turns_tenant_id_created_at"),
            ["tenant_id", "created_at"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_message_turns_tenant_id_session_id_id"),
            ["tenant_id", "session_id", "id"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("message_turns", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_message_turns_tenant_id_session_id_id"))
        batch_op.drop_index(batch_op.f("ix_message_turns_tenant_id_created_at"))
    op.drop_table("message_turns")
