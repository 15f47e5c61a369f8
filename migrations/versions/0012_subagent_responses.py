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
    with op.batch_alter_table("responses") as batch_op:
        batch_op.add_column(sa.Column("spawned_by", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("agent_name", sa.String(400), nullable=True))
        batch_op.create_index(batch_op.f("ix_responses_spawned_by"), ["spawned_by"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("responses") as batch_op:
        batch_op.drop_index(batch_op.f("ix_responses_spawned_by"))
        batch_op.drop_column("agent_name")
        batch_op.drop_column("spawned_by")
