"""Fencing inside the caller's transaction, sync: ``provider.guard(conn, key, fence)``.

The catalogue's guard statement (as the async `sql_lease._sqlprovider.guard` sends it) on a
SQLAlchemy sync `Connection`: the live lease row of ``key`` with ``fence`` is read ``FOR SHARE``,
so it cannot change hands until the caller's transaction ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .._sqlprovider.guard import guard_arguments, guard_clause, guard_statement, in_autocommit
from ..backends._urls import redact
from ..errors import LeaseLost, LeaseTypeError, LeaseValueError

if TYPE_CHECKING:
    from ..backends import Dialect
    from ..catalogue import Catalogue

__all__ = ["guard"]


def guard(catalogue: Catalogue, backend: Dialect, conn: Connection, key: str, fence: int) -> None:
    """Lock ``key``'s live lease row with ``fence`` in ``conn``'s transaction, or raise.

    Raises `LeaseLost` when ``fence`` is not the live fence of ``key``. Needs PostgreSQL (a
    catalogue with a guard, and ``conn`` on its dialect) and a connection in a transaction (not
    AUTOCOMMIT); database failures are `LeaseDatabaseError`s, translated by ``backend``.
    """
    k = guard_arguments(key, fence)
    if not isinstance(conn, Connection):
        raise LeaseTypeError(f"conn must be a sync Connection, not {type(conn).__name__}")
    sql = guard_statement(catalogue, conn.dialect.name)
    table = catalogue.table
    try:
        driver = conn.connection.dbapi_connection
        if in_autocommit(driver):
            raise LeaseValueError("guard needs a transaction: conn is in AUTOCOMMIT mode")
        row = conn.execute(guard_clause(sql), {"key": k, "fence": fence}).first()
    except DBAPIError as exc:
        cause = exc.orig if exc.orig is not None else exc
        raise backend.translate(
            cause, operation="guard", where=redact(conn.engine.url), sent=False, table=table
        ) from exc
    if row is None:
        raise LeaseLost(key, None, fence, "the fence is not the live fence of the key")
