"""The one place where psycopg, psycopg_pool and sqlite3 exceptions become `LeaseError`s.

Mirrors `sql_lease._dberrors` for the sync drivers and reuses its classification by SQLSTATE
(psycopg errors carry ``sqlstate`` as asyncpg's do) and its SQLite rules; what psycopg reports
without a SQLSTATE (a refused or broken connection, a pool checkout that timed out) and the
client-side deadline are handled here. The caller chains the original as ``__cause__``.
"""

from __future__ import annotations

import psycopg
import psycopg_pool

from .._dberrors import translate as translate_async
from ..errors import LeaseConnectionError, LeaseDatabaseError, LeaseTimeoutError

__all__ = ["is_broken", "translate"]

_BROKEN_PREFIXES = ("08", "57P")  # connection exceptions, operator intervention (shutdown)


def is_broken(exc: BaseException) -> bool:
    """True when ``exc`` says the connection it ran on is unusable."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        return state.startswith(_BROKEN_PREFIXES)
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | OSError)


def _detail(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def translate(
    exc: BaseException,
    *,
    operation: str,
    where: str,
    sent: bool,
    table: str,
    timed_out: bool = False,
) -> LeaseDatabaseError:
    """Map ``exc`` raised while running ``operation`` to a typed error.

    ``sent``: the statement may have reached the server (a write in flight whose outcome is
    then unknown when the connection broke or the deadline passed). ``timed_out``: the
    provider's own deadline interrupted the call.
    """
    detail = _detail(exc)
    if timed_out:
        return LeaseTimeoutError(
            f"{operation}: no answer from {where} within the timeout ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return LeaseTimeoutError(
            f"{operation}: no free connection to {where} within the timeout ({detail})",
            operation=operation,
        )
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and (
        getattr(exc, "sqlstate", None) is None
    ):
        return LeaseConnectionError(
            f"{operation}: lost or refused connection to {where} ({detail})",
            operation=operation,
            outcome_unknown=sent,
        )
    if isinstance(exc, psycopg_pool.PoolClosed):
        return LeaseConnectionError(f"{operation}: the pool is closed", operation=operation)
    return translate_async(exc, operation=operation, where=where, sent=sent, table=table)
