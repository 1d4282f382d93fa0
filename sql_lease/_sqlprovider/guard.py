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
from typing import TYPE_CHECKING, Any

from sqlalchemy import TextClause, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from .._core.validate import check_name
from ..backends._urls import redact
from ..errors import LeaseLost, LeaseTypeError, LeaseValueError

if TYPE_CHECKING:
    from ..backends import Dialect
    from ..catalogue import Catalogue

__all__ = [
    "guard",
    "guard_arguments",
    "guard_clause",
    "guard_failed",
    "guard_passed",
    "guard_prepared",
    "guard_statement",
    "in_autocommit",
]


@lru_cache(maxsize=64)
def guard_clause(sql: str) -> TextClause:
    """The catalogue's guard statement as a SQLAlchemy clause: (:key, :fence) -> a row."""
    return text(sql)


def guard_arguments(key: str, fence: object) -> bytes:
    """A guard's argument checks (async and sync), before any I/O: ``key``'s stored bytes."""
    k = check_name("key", key)
    if not isinstance(fence, int) or isinstance(fence, bool):
        raise LeaseTypeError(f"fence must be an int, not {type(fence).__name__}")
    return k


def guard_statement(catalogue: Catalogue, dialect: str) -> str:
    """The catalogue's guard statement for a connection of ``dialect`` (PostgreSQL, MariaDB)."""
    statement = catalogue.guard
    if statement is None or dialect != catalogue.dialect:
        # Only PostgreSQL's catalogue has a guard (SQLite cannot lock a row FOR SHARE).
        given = dialect if statement is not None else catalogue.dialect
        raise LeaseValueError(f"guard needs PostgreSQL, not {given}")
    return statement.sql


def guard_prepared(
    catalogue: Catalogue, conn: Any, kind: type[Any], what: str, key: str, fence: object
) -> tuple[TextClause, dict[str, object]]:
    """A guard's checks before any I/O (async and sync): ``conn`` is a ``kind`` (``what``, for
    the message) on PostgreSQL; the statement and its bound values."""
    k = guard_arguments(key, fence)
    if not isinstance(conn, kind):
        raise LeaseTypeError(f"conn must be {what}, not {type(conn).__name__}")
    return guard_clause(guard_statement(catalogue, conn.dialect.name)), {"key": k, "fence": fence}


def guard_failed(
    backend: Dialect, exc: BaseException, conn: Any, catalogue: Catalogue
) -> BaseException:
    """The `LeaseError` a guard's database failure ``exc`` raises (translated by ``backend``)."""
    where = redact(conn.engine.url)
    return backend.translate(exc, operation="guard", where=where, sent=False, table=catalogue.table)


def guard_passed(row: object, key: str, fence: int) -> None:
    """`LeaseLost` unless the guard statement found the live row (``row``)."""
    if row is None:
        raise LeaseLost(key, None, fence, "the fence is not the live fence of the key")


def in_autocommit(dbapi_connection: object) -> bool:
    """Whether a DBAPI connection is in autocommit mode (async and sync): an attribute on
    PostgreSQL's and SQLite's drivers, ``get_autocommit()`` on MariaDB's."""
    getter = getattr(dbapi_connection, "get_autocommit", None)
    if callable(getter):
        return bool(getter())
    return bool(getattr(dbapi_connection, "autocommit", False))


async def _autocommit(conn: AsyncConnection) -> bool:
    raw = await conn.get_raw_connection()
    return in_autocommit(raw.dbapi_connection)


async def guard(
    catalogue: Catalogue, backend: Dialect, conn: AsyncConnection, key: str, fence: int
) -> None:
    """Lock ``key``'s live lease row with ``fence`` in ``conn``'s transaction, or raise.

    Raises `LeaseLost` when ``fence`` is not the live fence of ``key`` (expired, released or
    another owner's). Database failures are `LeaseDatabaseError`s; under REPEATABLE READ or
    SERIALIZABLE a row changed since the snapshot is a serialization failure: retry the
    transaction. Needs PostgreSQL and a connection in a transaction (not AUTOCOMMIT).
    """
    clause, values = guard_prepared(
        catalogue, conn, AsyncConnection, "an AsyncConnection", key, fence
    )
    try:
        if await _autocommit(conn):
            raise LeaseValueError("guard needs a transaction: conn is in AUTOCOMMIT mode")
        result = await conn.execute(clause, values)
        row = result.first()
    except DBAPIError as exc:
        raise guard_failed(backend, exc, conn, catalogue) from exc
    guard_passed(row, key, fence)
