"""Fencing inside the database: ``await provider.guard(conn, key, fence)`` (PostgreSQL).

Inside the caller's own transaction, check that ``fence`` is still the live fence of ``key``
and keep it so until that transaction ends: the row is read ``FOR SHARE``, which blocks any
change to it (the holder's renew, a transfer, a new owner's acquire after expiry, a release)
until the caller commits or rolls back. A writer that paused past its TTL while another owner
took over therefore cannot commit a guarded write; one whose guard passed commits as the
owner, even if its lease would have expired meanwhile.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from ._dberrors import translate
from ._hold import LeaseLost
from ._urls import redact
from ._validate import check_name
from .errors import LeaseTypeError, LeaseValueError

__all__ = ["guard", "guard_statement"]


@lru_cache(maxsize=64)
def guard_statement(table: str) -> TextClause:
    """The guard for an already quoted table name: (:key, :fence) -> one row when live."""
    return text(
        f"SELECT 1 FROM {table} WHERE key = :key AND fence = :fence"
        " AND expires_at > clock_timestamp() FOR SHARE"
    )


async def _autocommit(conn: AsyncConnection) -> bool:
    raw = await conn.get_raw_connection()
    return bool(getattr(raw.dbapi_connection, "autocommit", False))


async def guard(provider: Any, conn: AsyncConnection, key: str, fence: int) -> None:
    """Lock ``key``'s live lease row with ``fence`` in ``conn``'s transaction, or raise.

    Raises `LeaseLost` when ``fence`` is not the live fence of ``key`` (expired, released or
    another owner's). Database failures are `LeaseDatabaseError`s; under REPEATABLE READ or
    SERIALIZABLE a row changed since the snapshot is a serialization failure: retry the
    transaction. Needs PostgreSQL and a connection in a transaction (not AUTOCOMMIT).
    """
    k = check_name("key", key)
    if not isinstance(fence, int) or isinstance(fence, bool):
        raise LeaseTypeError(f"fence must be an int, not {type(fence).__name__}")
    if not isinstance(conn, AsyncConnection):
        raise LeaseTypeError(f"conn must be an AsyncConnection, not {type(conn).__name__}")
    if conn.dialect.name != "postgresql":
        raise LeaseValueError(f"guard needs PostgreSQL, not {conn.dialect.name}")
    table: str = provider._sql.table
    try:
        if await _autocommit(conn):
            raise LeaseValueError("guard needs a transaction: conn is in AUTOCOMMIT mode")
        result = await conn.execute(guard_statement(table), {"key": k, "fence": fence})
        row = result.first()
    except DBAPIError as exc:
        raise translate(
            exc, operation="guard", where=redact(conn.engine.url), sent=False, table=table
        ) from exc
    if row is None:
        raise LeaseLost(key, None, fence, "the fence is not the live fence of the key")
