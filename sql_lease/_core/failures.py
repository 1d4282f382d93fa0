"""What a backend's classifier answers about a failure, and the helpers its translation shares.

Each backend owns ONE classifier (``classify(exc) -> Failure``), used both by the execution
loop (keep, drop or replace the connection; run a read again) and by its ``translate`` (which
`LeaseError` subclass, with which message). This module knows no driver. Messages never
include a password: they carry the operation, the redacted URL and the driver's own message.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

from ..errors import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseSchemaError,
    LeaseTimeoutError,
)

__all__ = ["Failure", "chain", "driver_message", "migrations_hint"]


class Failure(enum.Enum):
    """A classified failure: what happened to the statement and to its connection."""

    #: The connection was unusable before anything was sent: drop it and use another.
    REFUSED = "refused"
    #: The connection broke (the server said so): drop it; a write's outcome is unknown.
    BROKEN = "broken"
    #: The database cannot be reached (network): drop the connection.
    UNREACHABLE = "unreachable"
    #: The database cannot be used (a SQLite file unreadable or not a database): the
    #: connection is not at fault, and a new one would meet the same.
    UNAVAILABLE = "unavailable"
    #: The database cancelled the statement or gave up on a lock: certainly not applied.
    CANCELLED = "cancelled"
    #: The statement was rolled back as a deadlock victim: nothing applied, run it again.
    CONFLICT = "conflict"
    #: The database stayed locked by other writers past its busy timeout (SQLite).
    BUSY = "busy"
    #: The leases table, a column or the fence sequence is missing: run the migrations.
    SCHEMA = "schema"
    #: The client-side deadline passed: a write's outcome is unknown.
    TIMEOUT = "timeout"
    #: No pooled connection came free within the timeout (nothing was sent).
    POOL_TIMEOUT = "pool_timeout"
    #: The connection pool is closed.
    POOL_CLOSED = "pool_closed"
    #: The statement failed in the database; the connection is fine.
    DATABASE = "database"
    #: Anything else: drop the connection, a write's outcome is unknown.
    UNKNOWN = "unknown"


#: Failures after which the connection is dropped rather than reused.
DROP: frozenset[Failure] = frozenset(
    {Failure.REFUSED, Failure.BROKEN, Failure.UNREACHABLE, Failure.UNKNOWN}
)
#: Failures of a connection (not of a statement): a read may run again on a new connection.
CONNECTION: frozenset[Failure] = frozenset({Failure.BROKEN, Failure.UNREACHABLE})


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it wraps: SQLAlchemy's ``orig``, then each ``__cause__``."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and all(cur is not s for s in seen):
        seen.append(cur)
        yield cur
        cur = getattr(cur, "orig", None) or cur.__cause__


def driver_message(exc: BaseException) -> str:
    """``Type: first line`` of the driver's own error (unwrapped from SQLAlchemy's)."""
    inner: BaseException = exc
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException):
        inner = orig.__cause__ or orig
    text = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__


def migrations_hint() -> str:
    return "apply the migrations to this database: `alembic upgrade head` or " + (
        "`sql_lease.migrate.upgrade(url)`"
    )


def server_error(
    kind: Failure, *, operation: str, where: str, sent: bool, table: str, detail: str
) -> LeaseDatabaseError:
    """The typed error of a ``kind`` that every server backend words alike (schema, broken,
    timeout, pool, unreachable, database, unknown); a backend's own kinds come first. ``sent``:
    the statement may have reached the server, so a lost connection or a timeout leaves the
    outcome unknown."""
    if kind is Failure.SCHEMA:
        return LeaseSchemaError(
            f"{operation}: the leases table {table} or its fence sequence is missing or "
            f"out of date in {where} ({detail}); {migrations_hint()}",
            operation=operation,
        )
    if kind is Failure.BROKEN:
        return LeaseConnectionError(
            f"{operation}: lost or refused connection to {where} ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    if kind is Failure.TIMEOUT:
        return LeaseTimeoutError(
            f"{operation}: no answer from {where} within the timeout ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    if kind is Failure.POOL_TIMEOUT:
        return LeaseTimeoutError(
            f"{operation}: no free connection to {where} within the timeout ({detail})",
            operation=operation,
        )
    if kind is Failure.POOL_CLOSED:
        return LeaseConnectionError(f"{operation}: the pool is closed", operation=operation)
    if kind in (Failure.REFUSED, Failure.UNREACHABLE):
        return LeaseConnectionError(
            f"{operation}: cannot reach {where} ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    if kind is Failure.DATABASE:
        return LeaseDatabaseError(
            f"{operation}: database error in {where} ({detail})", operation=operation
        )
    return LeaseDatabaseError(
        f"{operation}: database failure in {where} ({detail})",
        operation=operation,
        outcome_unknown=sent,
    )
