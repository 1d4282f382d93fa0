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


def _mariadb() -> bool:
    return op.get_context().dialect.name == "mariadb"


def upgrade() -> None:
    names = migration_names()
    if _mariadb():  # DATETIME(6): microseconds, UTC as every time of the table
        op.execute(f"ALTER TABLE `{names.table}` ADD COLUMN wanted_until DATETIME(6) NULL")
        return
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
    if _mariadb():
        op.execute(f"ALTER TABLE `{names.table}` DROP COLUMN wanted_until")
        return
    op.drop_column(names.table, "wanted_until", schema=names.schema)
