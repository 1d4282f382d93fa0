"""The leases table, defined once in SQLAlchemy Core.

An application can add it to its own `MetaData` with `lease_table(its_metadata)`. Keys and owners
are stored as the UTF-8 bytes of the Python string (``bytea``): PostgreSQL ``text`` cannot hold
NUL, and Mastra's thread keys contain it. Expiry (``expires_at``) is the only column renewals
change and it is not indexed, so renewals are HOT updates; the table leaves room for them
(``fillfactor``). Fences come from one sequence per table with ``CACHE 1``: a per-session cache
would hand out values out of order across connections. ``slot_limit`` and ``holders``
(migration 0009) stay NULL on plain leases; a counting lease or a lease with metadata keeps
its grants there (see `sql_lease._core.counting`).
"""

from __future__ import annotations

import hashlib
from typing import Final

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    Table,
)
from sqlalchemy.dialects.postgresql import JSONB

from ._core.validate import MAX_NAME_BYTES, check_identifier

__all__ = [
    "DEFAULT_TABLE",
    "FILLFACTOR",
    "fence_sequence_name",
    "lease_table",
    "leases",
    "metadata",
    "migration_lock_key",
    "notify_channel",
    "version_table_name",
]

DEFAULT_TABLE: Final = "leases"
FILLFACTOR: Final = 70


def fence_sequence_name(table_name: str) -> str:
    """Name of the sequence that issues fences for ``table_name``."""
    return f"{table_name}_fence_seq"


def version_table_name(table_name: str) -> str:
    """Name of the Alembic version table of the library's migrations for ``table_name``."""
    return f"{table_name}_alembic_version"


def migration_lock_key(table_name: str, schema: str | None = None) -> int:
    """The PostgreSQL advisory lock key that serialises the library's migrations of one table.

    The first 8 bytes of the SHA-256 of ``sql_lease.migrations:<schema>.<version table>``
    (schema ``public`` when None), as a signed 64-bit integer: fixed for a given table, and
    derived from the version table's name so that two libraries' locks never collide.
    """
    name = f"sql_lease.migrations:{schema or 'public'}.{version_table_name(table_name)}"
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def notify_channel(table_name: str, schema: str | None = None) -> str:
    """The LISTEN/NOTIFY channel on which changes to wanted keys of the table are announced."""
    name = f"sql_lease:{schema}.{table_name}" if schema else f"sql_lease:{table_name}"
    if len(name) > 63:  # PostgreSQL truncates identifiers at 63 bytes
        name = "sql_lease:" + hashlib.sha1(name.encode()).hexdigest()
    return name


def lease_table(metadata: MetaData, name: str = DEFAULT_TABLE, schema: str | None = None) -> Table:
    """Define the leases table (and its fence sequence) in ``metadata`` and return it."""
    check_identifier("table_name", name)
    if schema is not None:
        check_identifier("schema", schema)
    Sequence(fence_sequence_name(name), metadata=metadata, schema=schema, cache=1)
    return Table(
        name,
        metadata,
        Column("key", LargeBinary, nullable=False, comment="UTF-8 bytes of the lease key"),
        Column("owner", LargeBinary, nullable=False, comment="UTF-8 bytes of the holder"),
        Column("fence", BigInteger, nullable=False, comment="fencing token"),
        Column("expires_at", DateTime(timezone=True), nullable=False),
        Column("acquired_at", DateTime(timezone=True), nullable=False),
        Column(
            "wanted_until",
            DateTime(timezone=True),
            nullable=True,
            comment="until when a waiter wants to hear of a release or transfer",
        ),
        Column(
            "slot_limit",
            Integer,
            nullable=True,
            comment="how many owners may hold the key at once (NULL: a plain lease)",
        ),
        Column(
            "holders",
            JSON().with_variant(JSONB(), "postgresql"),
            nullable=True,
            comment="the grants of a counting lease or a lease with metadata (JSON)",
        ),
        PrimaryKeyConstraint("key", name=f"{name}_pkey"),
        CheckConstraint(f"length(key) BETWEEN 1 AND {MAX_NAME_BYTES}", name=f"{name}_key_len"),
        CheckConstraint(f"length(owner) BETWEEN 1 AND {MAX_NAME_BYTES}", name=f"{name}_owner_len"),
        schema=schema,
        postgresql_with={"fillfactor": FILLFACTOR},
        comment="sql_lease: one row per lease key",
    )


#: The library's own metadata with the default table, as the migrations create it.
metadata: Final = MetaData()
leases: Final = lease_table(metadata)
