"""Create the leases table and its fence sequence.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sql_lease.migrate import migration_names

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _sqlite() -> bool:
    return op.get_context().dialect.name == "sqlite"


# Frozen with this revision (a shipped migration never changes): the SQLite fence counter and
# the triggers that keep it ahead of every fence handed out. ``t`` is a validated table name.
def _counter_table_name(t: str) -> str:
    return f"{t}_fence_seq"


def _sqlite_ddl(t: str) -> list[str]:
    c = _counter_table_name(t)
    return [
        f'CREATE TABLE "{c}" (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL)',
        f'INSERT INTO "{c}" (id, value) VALUES (1, 0)',
        f'CREATE TRIGGER "{t}_fence_ins" AFTER INSERT ON "{t}" BEGIN '
        f'UPDATE "{c}" SET value = NEW.fence WHERE id = 1 AND NEW.fence > value; END',
        f'CREATE TRIGGER "{t}_fence_upd" AFTER UPDATE OF fence ON "{t}" '
        f"WHEN NEW.fence <> OLD.fence BEGIN "
        f'UPDATE "{c}" SET value = NEW.fence WHERE id = 1 AND NEW.fence > value; END',
    ]


def upgrade() -> None:
    names = migration_names()
    t = names.table
    if not _sqlite():
        # CACHE 1: a per-session cache would hand out fences out of order across connections.
        op.execute(
            sa.schema.CreateSequence(sa.Sequence(names.sequence, schema=names.schema, cache=1))
        )
    op.create_table(
        t,
        sa.Column("key", sa.LargeBinary(), nullable=False, comment="UTF-8 bytes of the lease key"),
        sa.Column("owner", sa.LargeBinary(), nullable=False, comment="UTF-8 bytes of the holder"),
        sa.Column("fence", sa.BigInteger(), nullable=False, comment="fencing token"),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=f"{t}_pkey"),
        sa.CheckConstraint("length(key) BETWEEN 1 AND 1024", name=f"{t}_key_len"),
        sa.CheckConstraint("length(owner) BETWEEN 1 AND 1024", name=f"{t}_owner_len"),
        schema=names.schema,
        postgresql_with={"fillfactor": 70},
        comment="sql_lease: one row per lease key",
    )
    if _sqlite():
        # No sequences in SQLite: a one-row counter that triggers keep ahead of every fence.
        for statement in _sqlite_ddl(t):
            op.execute(statement)


def downgrade() -> None:
    names = migration_names()
    op.drop_table(names.table, schema=names.schema)  # SQLite drops the triggers with it
    if _sqlite():
        op.drop_table(_counter_table_name(names.table))
    else:
        op.execute(sa.schema.DropSequence(sa.Sequence(names.sequence, schema=names.schema)))
