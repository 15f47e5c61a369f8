"""console: sessions read over an index, and logouts that end a session server-side

``responses (tenant_id, session_id, id)`` lets the console group a tenant's turns by
session and read one session's timeline in id order without sorting the tenant's rows.
``console_logouts`` holds the nonce of each console session that logged out, until the
session's cookie would have expired anyway, so a copied cookie stops working at logout.

Revision ID: 0008_console_pages
Revises: 0007_background_order
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_console_pages"
down_revision: str | None = "0007_background_order"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_responses_tenant_id_session_id_id", "responses", ["tenant_id", "session_id", "id"]
    )
    op.create_table(
        "console_logouts",
        sa.Column("nonce", sa.String(length=64), primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_console_logouts_expires_at", "console_logouts", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_logouts_expires_at", table_name="console_logouts")
    op.drop_table("console_logouts")
    op.drop_index("ix_responses_tenant_id_session_id_id", table_name="responses")
