"""response events stored as runs: one row holds consecutive events

A streamed turn stored one row per event (hundreds per turn), which was most of what its
commit cost. A row now holds a run, ``sequence_number`` .. ``last_sequence_number``, its
events' JSON joined by newlines. Rows written before keep NULL there: one event each, read
as before. Adding a nullable column rewrites nothing on either database.

Revision ID: 0006_event_runs
Revises: 0003_hardening
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_event_runs"
down_revision: str | None = "0003_hardening"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("response_events", sa.Column("last_sequence_number", sa.Integer(), nullable=True))


def downgrade() -> None:
    # Runs would read as their first event only: split them back into one row per event.
    bind = op.get_bind()
    events = sa.table(
        "response_events",
        sa.column("response_id", sa.String),
        sa.column("sequence_number", sa.Integer),
        sa.column("last_sequence_number", sa.Integer),
        sa.column("data", sa.Text),
    )
    runs = bind.execute(
        sa.select(events.c.response_id, events.c.sequence_number, events.c.data).where(
            events.c.last_sequence_number > events.c.sequence_number
        )
    ).all()
    for response_id, first, data in runs:
        bind.execute(
            events.delete().where(
                events.c.response_id == response_id, events.c.sequence_number == first
            )
        )
        pieces = data.split("\n")
        bind.execute(
            events.insert(),
            [
                {"response_id": response_id, "sequence_number": first + offset, "data": piece}
                for offset, piece in enumerate(pieces)
            ],
        )
    with op.batch_alter_table("response_events") as batch:
        batch.drop_column("last_sequence_number")
