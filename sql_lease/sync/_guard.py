"""Fencing inside the caller's transaction, sync: ``provider.guard(conn, key, fence)``.

The catalogue's guard statement (as the async `sql_lease._sqlprovider.guard` sends it) on a
SQLAlchemy sync `Connection`: the live lease row of ``key`` with ``fence`` is read ``FOR SHARE``,
so it cannot change hands until the caller's transaction ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .._sqlprovider.guard import guard_failed, guard_passed, guard_prepared, in_autocommit
from ..errors import LeaseValueError

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
    clause, values = guard_prepared(catalogue, conn, Connection, "a sync Connection", key, fence)
    try:
        driver = conn.connection.dbapi_connection
        if in_autocommit(driver):
            raise LeaseValueError("guard needs a transaction: conn is in AUTOCOMMIT mode")
        row = conn.execute(clause, values).first()
    except DBAPIError as exc:
        cause = exc.orig if exc.orig is not None else exc
        raise guard_failed(backend, cause, conn, catalogue) from exc
    guard_passed(row, key, fence)
