"""retention: indexes the pruning reads by age, and a conversation's safety identifier

The retention sweep (``background/retention.py``) reads the oldest rows of all tenants at
once: ``responses``, ``conversations`` and ``message_turns`` get an index on their age
alone (the existing ones lead with the tenant). ``conversations.safety_identifier`` keeps
what ``conversations.create`` was given (openai 3.63).

Revision ID: 0010_retention
Revises: 0009_lost_tokens
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_retention"
down_revision: str | None = "0009_lost_tokens"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_responses_created_at", "responses", ["created_at"])
    op.create_index("ix_conversations_updated_at", "conversations", ["updated_at"])
    op.create_index("ix_message_turns_created_at", "message_turns", ["created_at"])
    op.add_column(
        "conversations", sa.Column("safety_identifier", sa.String(length=128), nullable=True)
    )


def downgrade() -> None:
    # Plain ALTER TABLE, never a batch: on SQLite a batch recreates ``conversations``, and
    # dropping the old table (foreign keys on) would reach the rows that refer to it.
    op.drop_column("conversations", "safety_identifier")
    op.drop_index("ix_message_turns_created_at", table_name="message_turns")
    op.drop_index("ix_conversations_updated_at", table_name="conversations")
    op.drop_index("ix_responses_created_at", table_name="responses")
