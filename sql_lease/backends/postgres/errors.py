"""PostgreSQL's one classifier and translation: asyncpg, psycopg and SQLAlchemy failures.

Classification is by SQLSTATE where the server gave one (asyncpg and psycopg both carry
``sqlstate``), else by exception type, looking through SQLAlchemy's wrappers. psycopg is the
optional `sync` extra: its types are consulted only once it has been imported (an exception
from it cannot exist before). The caller chains the original exception as ``__cause__``.
"""

from __future__ import annotations

import sys

import asyncpg
from sqlalchemy import exc as sa_exc

from ..._core.failures import Failure, chain, driver_message, server_error
from ...errors import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseTimeoutError,
)

__all__ = ["NotSentError", "PartlyApplied", "classify", "translate"]


class NotSentError(Exception):
    """A driver adaptor found its connection closed before sending anything (REFUSED)."""


# SQLSTATEs whose statement certainly did not take effect: it was cancelled or never ran.
_CANCELLED_STATES = frozenset({"57014", "55P03"})  # query_canceled, lock_not_available
_CONFLICT_STATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
_SCHEMA_STATES = frozenset({"42P01", "42703", "42704", "42883"})  # undefined table/column/object
# Connection exception, insufficient resources, operator intervention (shutdown), auth: the
# connection is not trusted again (a new one costs little).
_CONNECTION_PREFIXES = ("08", "53", "57P", "28")
# read_only_sql_transaction: the server is a standby or was demoted. The write was refused
# before it applied; drop the connection so the next one finds the writable host (with
# several hosts and target_session_attrs=read-write in the URL).
_READ_ONLY_STATE = "25006"

_REFUSED_TYPES = (
    asyncpg.InterfaceError,  # asyncpg refuses a closed connection before sending anything
    asyncpg.InternalClientError,  # protocol confused by a backend killed mid-handshake
)
_UNREACHABLE_TYPES = (OSError, sa_exc.InterfaceError, sa_exc.OperationalError)


class PartlyApplied(Exception):
    """A statement sent as several calls (one per worker) failed after the first ``done`` of
    them ran and committed: its outcome is unknown for every call it carried. No SQLSTATE of
    its own, so it is never taken for a statement that ran nowhere (which may be sent again:
    a deadlock, a lock wait given up), whatever its cause says."""

    def __init__(self, done: int, calls: int) -> None:
        super().__init__(f"{done} of {calls} per-worker calls ran before one failed")


def _sqlstate(exc: BaseException) -> str | None:
    for link in chain(exc):
        state = getattr(link, "sqlstate", None) or getattr(link, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


def _psycopg(exc: BaseException) -> Failure | None:
    psycopg_pool = sys.modules.get("psycopg_pool")
    if psycopg_pool is not None:
        if isinstance(exc, psycopg_pool.PoolTimeout):
            return Failure.POOL_TIMEOUT
        if isinstance(exc, psycopg_pool.PoolClosed):
            return Failure.POOL_CLOSED
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return Failure.BROKEN  # without a SQLSTATE: refused or lost connection
    return None


def classify(exc: BaseException) -> Failure:
    """What ``exc`` (raised by a statement, a connect or a checkout) says happened."""
    if isinstance(exc, NotSentError):
        return Failure.REFUSED
    if isinstance(exc, PartlyApplied):
        return Failure.UNKNOWN  # never sent again: part of it ran
    state = _sqlstate(exc)
    if state is not None:
        if state in _CANCELLED_STATES:
            return Failure.CANCELLED
        if state in _SCHEMA_STATES:
            return Failure.SCHEMA
        if state in _CONFLICT_STATES:
            return Failure.CONFLICT
        if state.startswith(_CONNECTION_PREFIXES) or state == _READ_ONLY_STATE:
            return Failure.BROKEN
        return Failure.DATABASE
    if isinstance(exc, TimeoutError | sa_exc.TimeoutError):
        return Failure.TIMEOUT
    if isinstance(exc, _REFUSED_TYPES):
        return Failure.REFUSED
    for link in chain(exc):
        found = _psycopg(link)
        if found is not None:
            return found
        if isinstance(link, _REFUSED_TYPES + _UNREACHABLE_TYPES):
            return Failure.UNREACHABLE
    if isinstance(exc, asyncpg.PostgresError):
        return Failure.DATABASE
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

    ``sent``: the statement may have reached the server, so a broken connection or a
    client-side timeout leaves the outcome unknown. ``timed_out``: the caller's own deadline
    interrupted the call, whatever ``exc`` says.
    """
    detail = driver_message(exc)
    kind = Failure.TIMEOUT if timed_out else classify(exc)
    if kind is Failure.CANCELLED:
        return LeaseTimeoutError(
            f"{operation}: the database cancelled the statement ({detail})", operation=operation
        )
    if kind is Failure.BROKEN and _sqlstate(exc) == _READ_ONLY_STATE:
        return LeaseConnectionError(
            f"{operation}: {where} is read-only (a standby or a demoted primary), nothing was "
            f"written ({detail}); list every host in the URL with "
            "target_session_attrs=read-write to reach the writable one",
            operation=operation,
            outcome_unknown=False,
        )
    return server_error(
        kind, operation=operation, where=where, sent=sent, table=table, detail=detail
    )
