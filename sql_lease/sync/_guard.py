"""Fencing inside the caller's transaction, sync: ``provider.guard(conn, key, fence)``.

The async guard's statement (`sql_lease._sqlprovider.guard.guard_statement`) on a SQLAlchemy sync
`Connection`: the live lease row of ``key`` with ``fence`` is read ``FOR SHARE``, so it cannot
change hands until the caller's transaction ends.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .._core.validate import check_name
from .._urls import redact
from ..errors import LeaseLost, LeaseTypeError, LeaseValueError
from ._catalogue import guard_statement
from ._errors import translate

__all__ = ["guard"]


def guard(conn: Connection, table: str, key: str, fence: int) -> None:
    """Lock ``key``'s live lease row with ``fence`` in ``conn``'s transaction, or raise.

    Raises `LeaseLost` when ``fence`` is not the live fence of ``key``. Needs PostgreSQL and a
    connection in a transaction (not AUTOCOMMIT); database failures are `LeaseDatabaseError`s.
    """
    k = check_name("key", key)
    if not isinstance(fence, int) or isinstance(fence, bool):
        raise LeaseTypeError(f"fence must be an int, not {type(fence).__name__}")
    if not isinstance(conn, Connection):
        raise LeaseTypeError(f"conn must be a sync Connection, not {type(conn).__name__}")
    if conn.dialect.name != "postgresql":
        raise LeaseValueError(f"guard needs PostgreSQL, not {conn.dialect.name}")
    try:
        driver = conn.connection.dbapi_connection
        if bool(getattr(driver, "autocommit", False)):
            raise LeaseValueError("guard needs a transaction: conn is in AUTOCOMMIT mode")
        row = conn.execute(guard_statement(table), {"key": k, "fence": fence}).first()
    except DBAPIError as exc:
        cause = exc.orig if exc.orig is not None else exc
        raise translate(
            cause, operation="guard", where=redact(conn.engine.url), sent=False, table=table
        ) from exc
    if row is None:
        raise LeaseLost(key, None, fence, "the fence is not the live fence of the key")
