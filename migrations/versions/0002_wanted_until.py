"""Add wanted_until: waiters mark a key so that its release or transfer sends a NOTIFY.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    names = migration_names()
    op.add_column(
        names.table,
        sa.Column(
            "wanted_until",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="until when a waiter wants to hear of a release or transfer",
        ),
        schema=names.schema,
    )


def downgrade() -> None:
    names = migration_names()
    op.drop_column(names.table, "wanted_until", schema=names.schema)
