"""agent_rounds: each agent's token account, round by round, in a multi-agent response

The hosted multi-agent beta runs a tree of agents inside one response; the response's
usage sums them all. This table keeps each agent's rounds (input, cached and output
tokens) and, for a subagent's first round, the cached tokens it should have found (every
full block of the prefix it shares with its parent), written in the response's commit.

Revision ID: 0011_agent_rounds
Revises: 0010_retention
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_agent_rounds"
down_revision: str | None = "0010_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_rounds",
        sa.Column("response_id", sa.String(64), nullable=False),
        sa.Column("agent_name", sa.String(400), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("parent_agent", sa.String(400), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("shared_prefix_tokens", sa.Integer(), nullable=True),
        sa.Column("expected_cached", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["response_id"],
            ["responses.id"],
            name=op.f("fk_agent_rounds_response_id_responses"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("response_id", "agent_name", "round", name=op.f("pk_agent_rounds")),
    )


def downgrade() -> None:
    op.drop_table("agent_rounds")
