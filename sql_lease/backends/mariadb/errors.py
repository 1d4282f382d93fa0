"""MariaDB's one classifier and translation: asyncmy, PyMySQL and SQLAlchemy failures.

Both drivers carry the server's (or the client library's) error number as ``args[0]``; the
classification is by that number, looking through SQLAlchemy's wrappers, else by type. Both are
the optional ``mariadb`` extra: their types are consulted only once they have been imported (an
exception from one cannot exist before), so this module imports without them. The caller chains
the original exception as ``__cause__``.
"""

from __future__ import annotations

import sys
from typing import Final

from sqlalchemy import exc as sa_exc

from ..._core.failures import Failure, chain, driver_message, server_error
from ...errors import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseTimeoutError,
)

__all__ = ["NotSentError", "classify", "error_code", "translate"]


class NotSentError(Exception):
    """An adaptor found its connection closed before sending anything (REFUSED)."""


#: The statement certainly did not take effect: a lock wait timeout (1205: the statement is
#: rolled back), ``max_statement_time`` (1969) or ``KILL QUERY`` (1317).
_CANCELLED: Final = frozenset({1205, 1969, 1317})
#: Deadlock victim (1213): the transaction was rolled back whole; run it again.
_CONFLICT: Final = frozenset({1213})
#: No such table or sequence (1146), unknown column (1054), not a sequence (4089, 4090).
_SCHEMA: Final = frozenset({1146, 1054, 4089, 4090})
#: The connection is gone: server gone away (2006), lost during a query (2013), killed
#: (1927), closed by the server (4031: idle), server shutdown (1053), too many connections
#: (1040) or the handshake failed (2012, 2027, 2055).
_BROKEN: Final = frozenset({2006, 2013, 1927, 4031, 1053, 1040, 2012, 2027, 2055})
#: The server cannot be reached: no route, refused, unknown host (2002, 2003, 2005).
_UNREACHABLE: Final = frozenset({2002, 2003, 2005})
#: The server refused the session: access denied (1044, 1045, 1698), unknown database (1049).
_UNAVAILABLE: Final = frozenset({1044, 1045, 1049, 1698})


def _driver_types() -> tuple[type[BaseException], ...]:
    """The base error classes of the drivers imported so far (asyncmy, PyMySQL)."""
    found: list[type[BaseException]] = []
    asyncmy_errors = sys.modules.get("asyncmy.errors")
    if asyncmy_errors is not None:
        found.append(asyncmy_errors.MySQLError)
    pymysql_err = sys.modules.get("pymysql.err")
    if pymysql_err is not None:
        found.append(pymysql_err.MySQLError)
    return tuple(found)


def error_code(exc: BaseException) -> int | None:
    """The MariaDB error number in ``exc`` or what it wraps, if any."""
    types = _driver_types()
    for link in chain(exc):
        if isinstance(link, types) and link.args and isinstance(link.args[0], int):
            code: int = link.args[0]
            return code or None
    return None


def classify(exc: BaseException) -> Failure:
    """What ``exc`` (raised by a statement, a connect or a checkout) says happened."""
    if isinstance(exc, NotSentError):
        return Failure.REFUSED
    code = error_code(exc)
    if code is not None:
        if code in _CANCELLED:
            return Failure.CANCELLED
        if code in _CONFLICT:
            return Failure.CONFLICT
        if code in _SCHEMA:
            return Failure.SCHEMA
        if code in _BROKEN:
            return Failure.BROKEN
        if code in _UNREACHABLE:
            return Failure.UNREACHABLE
        if code in _UNAVAILABLE:
            return Failure.UNAVAILABLE
        if code >= 2000:  # the client library's own errors: the connection is not trusted
            return Failure.BROKEN
        return Failure.DATABASE
    if isinstance(exc, TimeoutError | sa_exc.TimeoutError):
        return Failure.TIMEOUT
    types = _driver_types()
    for link in chain(exc):
        if isinstance(link, types):
            # InterfaceError(0, 'Not connected'): refused before anything was sent.
            return Failure.REFUSED
        if isinstance(link, OSError | sa_exc.InterfaceError | sa_exc.OperationalError):
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

    ``sent``: the statement may have reached the server, so a broken connection or a
    client-side timeout leaves the outcome unknown. ``timed_out``: the caller's own deadline
    interrupted the call, whatever ``exc`` says.
    """
    detail = driver_message(exc)
    kind = Failure.TIMEOUT if timed_out else classify(exc)
    if kind is Failure.CANCELLED:
        return LeaseTimeoutError(
            f"{operation}: MariaDB gave up on the statement, nothing was applied ({detail})",
            operation=operation,
        )
    if kind is Failure.CONFLICT:
        return LeaseTimeoutError(
            f"{operation}: MariaDB rolled the statement back as a deadlock victim, nothing was "
            f"applied ({detail})",
            operation=operation,
        )
    if kind is Failure.UNAVAILABLE:
        return LeaseConnectionError(
            f"{operation}: cannot use {where} ({detail})", operation=operation
        )
    return server_error(
        kind, operation=operation, where=where, sent=sent, table=table, detail=detail
    )
