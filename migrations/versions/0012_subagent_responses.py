"""responses: a multi-agent response's subagents stored as responses of their own

Each subagent of a hosted multi-agent tree is stored, in the commit of the response that
spawned it, as a response that can be retrieved, listed and continued: ``spawned_by``
names that response (indexed: the admin agents view lists a response's subagents) and
``agent_name`` the agent's name in its tree. Both NULL for every other response.

Revision ID: 0012_subagent_responses
Revises: 0011_agent_rounds
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_subagent_responses"
down_revision: str | None = "0011_agent_rounds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("responses", sa.Column("spawned_by", sa.String(64), nullable=True))
    op.add_column("responses", sa.Column("agent_name", sa.String(400), nullable=True))
    op.create_index(op.f("ix_responses_spawned_by"), "responses", ["spawned_by"], unique=False)


def downgrade() -> None:
    # Plain ALTER TABLE, never a batch: on SQLite a batch recreates ``responses``, and
    # dropping the old table (foreign keys on) cascades to every response's events and
    # items (0009 drops its columns the same way).
    op.drop_index(op.f("ix_responses_spawned_by"), table_name="responses")
    op.drop_column("responses", "agent_name")
    op.drop_column("responses", "spawned_by")
