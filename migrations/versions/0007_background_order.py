"""background jobs ordered by completion window and grouped by continuation id

``background_options.completion_window`` becomes ``window_rank`` (0 soonest, 1 2h, 2 8h):
the queue hands out the lowest rank first, oldest first within it. Jobs that name the same
``continuation_id`` (per tenant) run one at a time in the order they were queued. Existing
rows take rank 0 and no group: they keep their order.

Revision ID: 0007_background_order
Revises: 0006_event_runs
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_background_order"
down_revision: str | None = "0006_event_runs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("window_rank", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("continuation_id", sa.String(length=64), nullable=True))
        batch.create_index(
            "ix_background_jobs_status_window_rank_enqueued_at",
            ["status", "window_rank", "enqueued_at"],
        )
        batch.create_index(
            "ix_background_jobs_tenant_id_continuation_id", ["tenant_id", "continuation_id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_index("ix_background_jobs_tenant_id_continuation_id")
        batch.drop_index("ix_background_jobs_status_window_rank_enqueued_at")
        batch.drop_column("continuation_id")
        batch.drop_column("window_rank")
