"""Counting leases and metadata: ``slot_limit`` and ``holders`` on the leases table.

A key held by up to N owners (``acquire_lease(..., limit=N)``), or held with metadata, is kept
in its one row: ``owner`` is the reserved byte ``\\xff`` (never the UTF-8 of a name, so no
statement of a plain lease ever matches it as its owner), ``slot_limit`` the N its holders
agreed on, ``holders`` a JSON array of the live grants (owner, fence, expiry, grant time,
metadata), ``fence`` the newest fence granted and ``expires_at`` the latest expiry of a holder.
Every change to the holders is one statement under that row's lock, so no two callers can
both take the last slot (see docs/explanation/counting-leases.md).

Plain rows keep both columns NULL and the hot statements never read them: existing rows keep
working and their statements are unchanged. PostgreSQL stores ``holders`` as ``jsonb``, SQLite
as JSON text, MariaDB as ``JSON`` (``LONGTEXT`` checked by ``JSON_VALID``; both columns added by
one ``ALTER TABLE``, its own branch: the columns SQLAlchemy's generic form made there, written
out). Downgrade drops both columns; run it only when no counting lease is live (a
counting row left behind reads as a lease held by the foreign owner ``\\xff`` until it expires).

Revision ID: 0009
Revises: 0006
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from sql_lease.migrate import migration_names

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_LIMIT_COMMENT = "how many owners may hold the key at once (NULL: a plain lease)"
_HOLDERS_COMMENT = "the grants of a counting lease or a lease with metadata (JSON)"


def _mariadb() -> bool:
    return op.get_context().dialect.name == "mariadb"


def upgrade() -> None:
    names = migration_names()
    if _mariadb():
        op.execute(
            f"ALTER TABLE `{names.table}` "
            f"ADD COLUMN slot_limit INT NULL COMMENT '{_LIMIT_COMMENT}', "
            f"ADD COLUMN holders JSON NULL COMMENT '{_HOLDERS_COMMENT}'"
        )
        return
    op.add_column(
        names.table,
        sa.Column(
            "slot_limit",
            sa.Integer(),
            nullable=True,
            comment=_LIMIT_COMMENT,
        ),
        schema=names.schema,
    )
    op.add_column(
        names.table,
        sa.Column(
            "holders",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
            comment=_HOLDERS_COMMENT,
        ),
        schema=names.schema,
    )


def downgrade() -> None:
    names = migration_names()
    if _mariadb():
        op.execute(f"ALTER TABLE `{names.table}` DROP COLUMN holders, DROP COLUMN slot_limit")
        return
    op.drop_column(names.table, "holders", schema=names.schema)
    op.drop_column(names.table, "slot_limit", schema=names.schema)
