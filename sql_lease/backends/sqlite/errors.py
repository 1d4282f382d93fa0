"""SQLite's one classifier and translation: sqlite3 errors (bare or wrapped by SQLAlchemy).

sqlite3 errors are found anywhere in the chain (SQLAlchemy wraps the ones raised while it
connects or runs its own setup), so a file that is not a database is a connection failure
wherever it shows. The caller chains the original exception as ``__cause__``.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy import exc as sa_exc

from ..._core.failures import Failure, chain, driver_message, migrations_hint
from ...errors import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseSchemaError,
    LeaseTimeoutError,
)

__all__ = ["ConnectionClosed", "classify", "is_busy", "translate"]

_UNUSABLE = ("SQLITE_CANTOPEN", "SQLITE_NOTADB", "SQLITE_IOERR", "SQLITE_PERM")


class ConnectionClosed(Exception):
    """The adaptor's connection was closed before the statement was sent (never sent)."""


def is_busy(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" family (the busy timeout ran out)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return isinstance(exc, sqlite3.OperationalError) and (
        name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)
    )


def _sqlite_error(exc: BaseException) -> sqlite3.Error | None:
    for link in chain(exc):
        if isinstance(link, sqlite3.Error):
            return link
    return None


def classify(exc: BaseException) -> Failure:
    """What ``exc`` (raised by a statement, a connect or a checkout) says happened."""
    if isinstance(exc, ConnectionClosed):
        return Failure.REFUSED
    error = _sqlite_error(exc)
    if error is not None:
        name = getattr(error, "sqlite_errorname", "") or ""
        text = str(error)
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
            return Failure.BUSY
        if "no such table" in text or "no such column" in text:
            return Failure.SCHEMA
        if name.startswith(_UNUSABLE) or "file is not a database" in text:
            return Failure.UNAVAILABLE
        return Failure.DATABASE
    if isinstance(exc, TimeoutError | sa_exc.TimeoutError):
        return Failure.TIMEOUT
    if any(isinstance(link, OSError) for link in chain(exc)):
        return Failure.UNREACHABLE
    return Failure.UNKNOWN


def translate(
    exc: BaseException,
    *,
    operation: str,
    where: str,
    sent: bool,
    table: str,
    timed_out: bool = False,
) -> LeaseDatabaseError:
    """Map ``exc`` raised while running ``operation`` to a typed error (caller chains it).

    ``sent``: the statement may have been applied (unknown outcome on a timeout).
    ``timed_out``: the caller's own deadline interrupted the call.
    """
    error = _sqlite_error(exc)
    detail = driver_message(exc if error is None else error)
    kind = Failure.TIMEOUT if timed_out else classify(exc)
    if kind is Failure.BUSY:
        return LeaseTimeoutError(
            f"{operation}: the SQLite database stayed locked by other writers past the "
            f"timeout ({detail})",
            operation=operation,
        )
    if kind is Failure.SCHEMA:
        return LeaseSchemaError(
            f"{operation}: the leases table {table} is missing or out of date in {where} "
            f"({detail}); {migrations_hint()}",
            operation=operation,
        )
    if kind in (Failure.UNAVAILABLE, Failure.UNREACHABLE):
        return LeaseConnectionError(
            f"{operation}: cannot use the SQLite database {where} ({detail})", operation=operation
        )
    if kind is Failure.REFUSED:
        return LeaseConnectionError(
            f"{operation}: the SQLite connection to {where} was closed ({detail})",
            operation=operation,
        )
    if kind is Failure.TIMEOUT:
        return LeaseTimeoutError(
            f"{operation}: no answer from {where} within the timeout ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    if kind is Failure.DATABASE:
        return LeaseDatabaseError(
            f"{operation}: SQLite error in {where} ({detail})", operation=operation
        )
    return LeaseDatabaseError(
        f"{operation}: database failure in {where} ({detail})",
        operation=operation,
        outcome_unknown=sent,
    )
