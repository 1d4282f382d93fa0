"""The one place where driver and pool exceptions become `LeaseError` subclasses.

Classification is by SQLSTATE where the server gave one, else by exception type. The original
exception is always chained as ``__cause__``. Messages never include a password: they carry the
operation, the redacted URL and the driver's own message.
"""

from __future__ import annotations

import asyncio
import sqlite3

import asyncpg
from sqlalchemy import exc as sa_exc

from .errors import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseSchemaError,
    LeaseTimeoutError,
)

__all__ = ["is_connection_failure", "translate"]

# SQLSTATEs whose statement certainly did not take effect: it was cancelled or never ran.
_TIMEOUT_STATES = frozenset({"57014", "55P03"})  # query_canceled, lock_not_available
_SCHEMA_STATES = frozenset({"42P01", "42703", "42704", "42883"})  # undefined table/column/object
_CONNECTION_PREFIXES = ("08", "53", "57P", "28")  # connection, resources, shutdown, auth


def _sqlstate(exc: BaseException) -> str | None:
    for link in _chain(exc):
        state = getattr(link, "sqlstate", None) or getattr(link, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


_CONNECTION_TYPES = (
    OSError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # protocol confused by a backend killed mid-handshake
    sa_exc.InterfaceError,
)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and all(cur is not s for s in seen):
        seen.append(cur)
        cur = getattr(cur, "orig", None) or cur.__cause__
    return seen


def is_connection_failure(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) says the connection failed or broke."""
    for link in _chain(exc):
        state = getattr(link, "sqlstate", None)
        if isinstance(state, str) and state.startswith(_CONNECTION_PREFIXES):
            return True
        if isinstance(link, _CONNECTION_TYPES):
            return True
    return False


def _driver_message(exc: BaseException) -> str:
    inner: BaseException = exc
    if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None:
        inner = exc.orig.__cause__ or exc.orig
    text = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__


def translate(
    exc: BaseException, *, operation: str, where: str, sent: bool, table: str
) -> LeaseDatabaseError:
    """Map ``exc`` raised while running ``operation`` to a typed error (caller chains it).

    ``sent`` says whether the statement may have reached the server: then a broken connection
    or a client-side timeout leaves the outcome unknown.
    """
    detail = _driver_message(exc)
    if isinstance(exc, sqlite3.Error):
        return _translate_sqlite(exc, detail, operation=operation, where=where, table=table)
    state = _sqlstate(exc)
    if state is not None:
        if state in _TIMEOUT_STATES:
            return LeaseTimeoutError(
                f"{operation}: the database cancelled the statement ({detail})",
                operation=operation,
            )
        if state in _SCHEMA_STATES:
            return LeaseSchemaError(
                f"{operation}: the leases table {table} or its fence sequence is missing or "
                f"out of date in {where} ({detail}); apply the migrations to this database: "
                "`alembic upgrade head` or `sql_lease.migrate.upgrade(url)`",
                operation=operation,
            )
        if state.startswith(_CONNECTION_PREFIXES):
            return LeaseConnectionError(
                f"{operation}: lost or refused connection to {where} ({detail})",
                operation=operation,
                outcome_unknown=sent,
            )
        return LeaseDatabaseError(
            f"{operation}: database error in {where} ({detail})", operation=operation
        )
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | sa_exc.TimeoutError):
        return LeaseTimeoutError(
            f"{operation}: no answer from {where} within the timeout ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    if isinstance(exc, sa_exc.OperationalError) or is_connection_failure(exc):
        return LeaseConnectionError(
            f"{operation}: cannot reach {where} ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    return LeaseDatabaseError(
        f"{operation}: database failure in {where} ({detail})",
        operation=operation,
        outcome_unknown=sent,
    )


def _translate_sqlite(
    exc: sqlite3.Error, detail: str, *, operation: str, where: str, table: str
) -> LeaseDatabaseError:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
        return LeaseTimeoutError(
            f"{operation}: the SQLite database stayed locked by other writers past the "
            f"timeout ({detail})",
            operation=operation,
        )
    if "no such table" in text or "no such column" in text:
        return LeaseSchemaError(
            f"{operation}: the leases table {table} is missing or out of date in {where} "
            f"({detail}); apply the migrations to this database: `alembic upgrade head` or "
            "`sql_lease.migrate.upgrade(url)`",
            operation=operation,
        )
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_NOTADB", "SQLITE_IOERR", "SQLITE_PERM")):
        return LeaseConnectionError(
            f"{operation}: cannot use the SQLite database {where} ({detail})", operation=operation
        )
    return LeaseDatabaseError(
        f"{operation}: SQLite error in {where} ({detail})", operation=operation
    )
