"""Error translation from synthetic driver exceptions: each backend's one classifier, no database.

asyncpg exceptions are built by hand with their SQLSTATEs, sqlite3 errors with their
``sqlite_errorname``, psycopg's without a SQLSTATE, plus OSError and TimeoutError, bare and
wrapped the way SQLAlchemy wraps them. Each must become the right `LeaseError` subclass, with
``outcome_unknown`` only where a sent write may have applied, and never show a password.
"""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from sql_lease import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseSchemaError,
    LeaseTimeoutError,
)
from sql_lease._core.failures import Failure
from sql_lease.backends._urls import redact
from sql_lease.backends.postgres import errors as pg
from sql_lease.backends.sqlite import errors as lite

SECRET = "s3cr3t-pw"
PG_WHERE = redact(make_url(f"postgresql+asyncpg://user:{SECRET}@db.example:5432/leases"))
LITE_WHERE = "sqlite+aiosqlite:///var/lib/app/leases.db"


def _pg(exc: BaseException, *, sent: bool = True) -> LeaseDatabaseError:
    return pg.translate(exc, operation="renew_lease", where=PG_WHERE, sent=sent, table='"leases"')


def _lite(exc: BaseException, *, sent: bool = True) -> LeaseDatabaseError:
    return lite.translate(
        exc, operation="renew_lease", where=LITE_WHERE, sent=sent, table='"leases"'
    )


def _sqlite_error(cls: type[sqlite3.Error], text: str, name: str) -> sqlite3.Error:
    error = cls(text)
    error.sqlite_errorname = name
    return error


def _wrapped(orig: BaseException) -> sa_exc.DBAPIError:
    """As SQLAlchemy raises a driver error from its own connect or statement."""
    wrapper = sa_exc.DBAPIError.instance("SELECT 1", None, orig, Exception)
    assert isinstance(wrapper, sa_exc.DBAPIError)
    return wrapper


PG_CASES = [
    (asyncpg.exceptions.QueryCanceledError("canceling statement"), LeaseTimeoutError, False),
    (asyncpg.exceptions.LockNotAvailableError("lock timeout"), LeaseTimeoutError, False),
    (
        asyncpg.exceptions.UndefinedTableError('relation "leases" does not exist'),
        LeaseSchemaError,
        False,
    ),
    (asyncpg.exceptions.UndefinedColumnError("column wanted_until"), LeaseSchemaError, False),
    (asyncpg.exceptions.AdminShutdownError("terminating connection"), LeaseConnectionError, True),
    (asyncpg.exceptions.ConnectionFailureError("connection failure"), LeaseConnectionError, True),
    (asyncpg.exceptions.TooManyConnectionsError("too many clients"), LeaseConnectionError, True),
    (
        asyncpg.exceptions.InvalidPasswordError("password authentication failed"),
        LeaseConnectionError,
        True,
    ),
    (asyncpg.exceptions.UniqueViolationError("duplicate key"), LeaseDatabaseError, False),
    (
        asyncpg.exceptions.ReadOnlySQLTransactionError(
            "cannot execute UPDATE in a read-only transaction"
        ),
        LeaseConnectionError,
        False,  # refused before anything applied
    ),
    (asyncpg.InterfaceError("connection is closed"), LeaseConnectionError, True),
    (ConnectionRefusedError(111, "Connection refused"), LeaseConnectionError, True),
    (TimeoutError(), LeaseTimeoutError, True),
    (RuntimeError("something else"), LeaseDatabaseError, True),
]


@pytest.mark.parametrize(("exc", "kind", "unknown"), PG_CASES, ids=lambda v: type(v).__name__)
def test_postgresql_failures_become_the_right_lease_error(
    exc: BaseException, kind: type[LeaseDatabaseError], unknown: bool
) -> None:
    error = _pg(exc)
    assert type(error) is kind
    assert error.operation == "renew_lease"
    assert error.outcome_unknown is unknown
    assert not _pg(exc, sent=False).outcome_unknown  # nothing sent: nothing can have applied
    assert SECRET not in str(error) and SECRET not in repr(error)
    if kind is not LeaseTimeoutError or unknown:
        assert "***" in str(error)  # the redacted URL says where


# SQLAlchemy wraps only DB-API errors (not TimeoutError or RuntimeError).
WRAPPABLE = [case for case in PG_CASES if not isinstance(case[0], TimeoutError | RuntimeError)]


@pytest.mark.parametrize(("exc", "kind", "unknown"), WRAPPABLE, ids=lambda v: type(v).__name__)
def test_postgresql_failures_wrapped_by_sqlalchemy_translate_alike(
    exc: BaseException, kind: type[LeaseDatabaseError], unknown: bool
) -> None:
    assert type(_pg(_wrapped(exc))) is kind


def test_one_sqlstate_set_decides_a_broken_postgresql_connection() -> None:
    # The execution loop drops the connection exactly when translation says "connection".
    for exc, kind, _ in PG_CASES:
        failure = pg.classify(exc)
        dropped = failure in (Failure.REFUSED, Failure.BROKEN, Failure.UNREACHABLE)
        assert dropped is (kind is LeaseConnectionError), exc
    assert pg.classify(asyncpg.InterfaceError("closed")) is Failure.REFUSED
    assert pg.classify(asyncpg.exceptions.AdminShutdownError("x")) is Failure.BROKEN


def test_a_read_only_server_drops_the_connection_and_names_the_fix() -> None:
    exc = asyncpg.exceptions.ReadOnlySQLTransactionError("cannot execute UPDATE")
    assert exc.sqlstate == "25006"
    assert pg.classify(exc) is Failure.BROKEN
    assert pg.classify(_wrapped(exc)) is Failure.BROKEN
    for error in (_pg(exc), _pg(_wrapped(exc))):
        assert type(error) is LeaseConnectionError
        assert error.outcome_unknown is False
        assert "read-only" in str(error) and "target_session_attrs=read-write" in str(error)


def test_a_timeout_says_so_even_when_the_driver_says_otherwise() -> None:
    error = pg.translate(
        OSError("reset"),
        operation="acquire_lease",
        where=PG_WHERE,
        sent=True,
        table="t",
        timed_out=True,
    )
    assert isinstance(error, LeaseTimeoutError) and error.outcome_unknown


def test_psycopg_failures_without_a_sqlstate() -> None:
    psycopg = pytest.importorskip("psycopg")
    psycopg_pool = pytest.importorskip("psycopg_pool")
    lost = _pg(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert isinstance(lost, LeaseConnectionError) and lost.outcome_unknown
    busy = _pg(psycopg_pool.PoolTimeout("couldn't get a connection after 5.00 sec"))
    assert isinstance(busy, LeaseTimeoutError) and not busy.outcome_unknown
    closed = _pg(psycopg_pool.PoolClosed("the pool is closed"))
    assert isinstance(closed, LeaseConnectionError)
    cancelled = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    assert isinstance(_pg(cancelled), LeaseTimeoutError)


LITE_CASES = [
    (
        _sqlite_error(sqlite3.OperationalError, "database is locked", "SQLITE_BUSY"),
        LeaseTimeoutError,
    ),
    (
        _sqlite_error(sqlite3.OperationalError, "database table is locked", "SQLITE_LOCKED"),
        LeaseTimeoutError,
    ),
    (
        _sqlite_error(sqlite3.OperationalError, "no such table: leases", "SQLITE_ERROR"),
        LeaseSchemaError,
    ),
    (
        _sqlite_error(sqlite3.OperationalError, "no such column: wanted_until", "SQLITE_ERROR"),
        LeaseSchemaError,
    ),
    (
        _sqlite_error(sqlite3.DatabaseError, "file is not a database", "SQLITE_NOTADB"),
        LeaseConnectionError,
    ),
    (
        _sqlite_error(sqlite3.OperationalError, "unable to open database file", "SQLITE_CANTOPEN"),
        LeaseConnectionError,
    ),
    (
        _sqlite_error(sqlite3.OperationalError, "disk I/O error", "SQLITE_IOERR"),
        LeaseConnectionError,
    ),
    (
        _sqlite_error(sqlite3.IntegrityError, "CHECK constraint failed", "SQLITE_CONSTRAINT_CHECK"),
        LeaseDatabaseError,
    ),
    (lite.ConnectionClosed("the SQLite connection is closed"), LeaseConnectionError),
]


@pytest.mark.parametrize(
    ("exc", "kind"), LITE_CASES, ids=lambda v: getattr(v, "sqlite_errorname", type(v).__name__)
)
def test_sqlite_failures_become_the_right_lease_error_bare_or_wrapped(
    exc: BaseException, kind: type[LeaseDatabaseError]
) -> None:
    assert type(_lite(exc)) is kind
    assert not _lite(exc).outcome_unknown  # SQLite rolls a failed statement back
    if isinstance(exc, sqlite3.Error):
        wrapped = _lite(_wrapped(exc))
        assert type(wrapped) is kind
        assert str(exc) in str(wrapped)  # the driver's own message, not SQLAlchemy's


def test_a_file_that_is_not_a_database_is_a_connection_failure_when_wrapped() -> None:
    # SQLAlchemy raises this while it sets a new connection up: it used to be a generic
    # "database failure" (CLI exit 5) instead of a connection failure (exit 3).
    orig = _sqlite_error(sqlite3.DatabaseError, "file is not a database", "SQLITE_NOTADB")
    wrapper = sa_exc.DatabaseError("PRAGMA journal_mode", None, orig)
    error = _lite(wrapper)
    assert isinstance(error, LeaseConnectionError)
    assert "file is not a database" in str(error)
    assert lite.classify(wrapper) is Failure.UNAVAILABLE


def test_sqlite_timeouts_and_others() -> None:
    late = _lite(TimeoutError())
    assert isinstance(late, LeaseTimeoutError) and late.outcome_unknown
    assert isinstance(_lite(PermissionError(13, "Permission denied")), LeaseConnectionError)
    other = _lite(RuntimeError("boom"))
    assert type(other) is LeaseDatabaseError and other.outcome_unknown
    assert lite.classify(lite.ConnectionClosed()) is Failure.REFUSED


def test_sqlite_code_raises_no_asyncpg_errors() -> None:
    assert not issubclass(lite.ConnectionClosed, asyncpg.InterfaceError)


def test_errors_keep_the_operation_and_chain_nothing_themselves() -> None:
    error = _pg(asyncpg.exceptions.QueryCanceledError("x"))
    assert error.__cause__ is None  # the caller chains (raise ... from exc)
    assert str(error).startswith("renew_lease: ")
