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


def _mariadb() -> bool:
    return op.get_context().dialect.name == "mariadb"


# Frozen with this revision: MariaDB's leases table (VARBINARY keys: NUL-safe bytes that fit
# InnoDB's index limit; DATETIME(6) in UTC, the server's UTC_TIMESTAMP(6)) and its fence
# sequence (NOCACHE: every value taken in order). 0002 adds wanted_until.
def _mariadb_ddl(t: str, sequence: str) -> list[str]:
    return [
        f"CREATE SEQUENCE `{sequence}` START WITH 1 INCREMENT BY 1 MINVALUE 1 NOCACHE NOCYCLE",
        f"CREATE TABLE `{t}` (`key` VARBINARY(1024) NOT NULL, owner VARBINARY(1024) NOT NULL, "
        "fence BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL, "
        "acquired_at DATETIME(6) NOT NULL, "
        "PRIMARY KEY (`key`), "
        f"CONSTRAINT `{t}_key_len` CHECK (LENGTH(`key`) BETWEEN 1 AND 1024), "
        f"CONSTRAINT `{t}_owner_len` CHECK (LENGTH(owner) BETWEEN 1 AND 1024)) "
        "ENGINE=InnoDB COMMENT='sql_lease: one row per lease key'",
    ]


def upgrade() -> None:
    names = migration_names()
    t = names.table
    if _mariadb():
        for statement in _mariadb_ddl(t, names.sequence):
            op.execute(statement)
        return
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
    if _mariadb():
        op.execute(f"DROP TABLE `{names.table}`")
        op.execute(f"DROP SEQUENCE `{names.sequence}`")
        return
    op.drop_table(names.table, schema=names.schema)  # SQLite drops the triggers with it
    if _sqlite():
        op.drop_table(_counter_table_name(names.table))
    else:
        op.execute(sa.schema.DropSequence(sa.Sequence(names.sequence, schema=names.schema)))
