"""The sync drivers' exceptions become typed `LeaseError`s: synthetic psycopg / sqlite3 errors.

No server is involved: each case builds the exception a driver raises (psycopg's classes carry
their SQLSTATE, as the server's answers do) and passes it to the backend's translating function
that the sync executors call (`sql_lease.backends.postgres.errors`, `...sqlite.errors`).
"""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg_pool
import pytest
from psycopg import errors as pg

from sql_lease import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseSchemaError,
    LeaseTimeoutError,
)
from sql_lease.backends.postgres.errors import translate as translate_pg
from sql_lease.backends.postgres.sync import is_broken
from sql_lease.backends.sqlite.errors import translate as translate_sqlite

WHERE = "postgresql://app:***@db:5432/app"


def tr(exc: BaseException, *, sent: bool = True, timed_out: bool = False) -> LeaseDatabaseError:
    """The backend's translation, as the sync executors call it (SQLite's for sqlite3 errors)."""
    translate = translate_sqlite if isinstance(exc, sqlite3.Error) else translate_pg
    return translate(
        exc, operation="renew_lease", where=WHERE, sent=sent, table="leases", timed_out=timed_out
    )


def sqlite_error(cls: type[sqlite3.Error], message: str, name: str) -> sqlite3.Error:
    exc = cls(message)
    exc.sqlite_errorname = name  # set by the sqlite3 module on the errors it raises
    return exc


@pytest.mark.parametrize(
    ("exc", "kind", "unknown_when_sent"),
    [
        # The server cancelled the statement (statement_timeout, lock_timeout): not applied.
        (
            pg.QueryCanceled("canceling statement due to statement timeout"),
            LeaseTimeoutError,
            False,
        ),
        (pg.LockNotAvailable("could not obtain lock on row"), LeaseTimeoutError, False),
        # The table or the fence sequence is missing: apply the migrations.
        (pg.UndefinedTable('relation "leases" does not exist'), LeaseSchemaError, False),
        (pg.UndefinedColumn('column "fence" does not exist'), LeaseSchemaError, False),
        # The connection broke or was refused: a write in flight may have been applied.
        (
            pg.AdminShutdown("terminating connection due to administrator command"),
            LeaseConnectionError,
            True,
        ),
        (
            pg.ConnectionFailure("server closed the connection unexpectedly"),
            LeaseConnectionError,
            True,
        ),
        (pg.TooManyConnections("sorry, too many clients already"), LeaseConnectionError, True),
        (
            pg.InvalidPassword('password authentication failed for user "app"'),
            LeaseConnectionError,
            True,
        ),
        (psycopg.OperationalError("connection refused"), LeaseConnectionError, True),
        (psycopg.InterfaceError("the connection is closed"), LeaseConnectionError, True),
        (ConnectionResetError(104, "Connection reset by peer"), LeaseConnectionError, True),
        # Anything else the server said: a plain database error.
        (
            pg.UniqueViolation("duplicate key value violates unique constraint"),
            LeaseDatabaseError,
            False,
        ),
        (pg.DivisionByZero("division by zero"), LeaseDatabaseError, False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_psycopg_errors_are_typed_by_sqlstate_or_class(
    exc: BaseException, kind: type[LeaseDatabaseError], unknown_when_sent: bool
) -> None:
    for sent in (True, False):
        got = tr(exc, sent=sent)
        assert type(got) is kind, (exc, got)
        assert got.operation == "renew_lease"
        assert got.outcome_unknown is (unknown_when_sent and sent), (exc, sent)
        assert str(got).startswith("renew_lease: ") and type(exc).__name__ in str(got)
        assert got.__cause__ is None  # the caller chains the original (`raise ... from exc`)


def test_a_schema_error_names_the_table_and_the_fix() -> None:
    got = tr(pg.UndefinedTable('relation "leases" does not exist'))
    assert "leases" in str(got) and "alembic upgrade head" in str(got) and WHERE in str(got)


def test_the_providers_own_deadline_is_a_timeout_whose_outcome_follows_sent() -> None:
    for exc in (psycopg.OperationalError("consuming input failed"), TimeoutError("late")):
        sent = tr(exc, sent=True, timed_out=True)
        assert isinstance(sent, LeaseTimeoutError) and sent.outcome_unknown is True
        assert "within the timeout" in str(sent)
        unsent = tr(exc, sent=False, timed_out=True)
        assert isinstance(unsent, LeaseTimeoutError) and unsent.outcome_unknown is False


def test_a_pool_checkout_that_timed_out_is_a_timeout_before_anything_was_sent() -> None:
    got = tr(psycopg_pool.PoolTimeout("couldn't get a connection after 5.00 sec"), sent=False)
    assert isinstance(got, LeaseTimeoutError) and got.outcome_unknown is False
    assert "no free connection" in str(got)


def test_a_closed_pool_is_a_connection_error_that_applied_nothing() -> None:
    got = tr(psycopg_pool.PoolClosed("the pool 'pool-1' is already closed"), sent=False)
    assert isinstance(got, LeaseConnectionError) and got.outcome_unknown is False
    assert "the pool is closed" in str(got)


def test_only_the_first_line_of_a_driver_message_is_kept() -> None:
    exc = pg.QueryCanceled("canceling statement due to lock timeout\nCONTEXT: while locking")
    got = tr(exc)
    assert "lock timeout" in str(got) and "CONTEXT" not in str(got)
    assert str(tr(psycopg.OperationalError(""))).endswith("(OperationalError)")


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (
            sqlite_error(sqlite3.OperationalError, "database is locked", "SQLITE_BUSY"),
            LeaseTimeoutError,
        ),
        (
            sqlite_error(sqlite3.OperationalError, "database table is locked", "SQLITE_LOCKED"),
            LeaseTimeoutError,
        ),
        (
            sqlite_error(sqlite3.OperationalError, "no such table: leases", "SQLITE_ERROR"),
            LeaseSchemaError,
        ),
        (
            sqlite_error(sqlite3.OperationalError, "no such column: fence", "SQLITE_ERROR"),
            LeaseSchemaError,
        ),
        (
            sqlite_error(
                sqlite3.OperationalError, "unable to open database file", "SQLITE_CANTOPEN"
            ),
            LeaseConnectionError,
        ),
        (
            sqlite_error(sqlite3.DatabaseError, "file is not a database", "SQLITE_NOTADB"),
            LeaseConnectionError,
        ),
        (
            sqlite_error(sqlite3.OperationalError, "disk I/O error", "SQLITE_IOERR_WRITE"),
            LeaseConnectionError,
        ),
        (
            sqlite_error(
                sqlite3.IntegrityError, "UNIQUE constraint failed", "SQLITE_CONSTRAINT_UNIQUE"
            ),
            LeaseDatabaseError,
        ),
    ],
    ids=lambda v: getattr(v, "sqlite_errorname", None) if isinstance(v, BaseException) else None,
)
def test_sqlite_errors_are_typed_by_error_name_and_message(
    exc: sqlite3.Error, kind: type[LeaseDatabaseError]
) -> None:
    got = tr(exc, sent=False)  # SQLite rolls a failed statement back: nothing in flight
    assert type(got) is kind, (exc, got)
    assert got.operation == "renew_lease" and got.outcome_unknown is False


def test_a_real_sqlite3_error_without_the_table() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            conn.execute("SELECT owner FROM leases")
    finally:
        conn.close()
    assert isinstance(tr(info.value, sent=False), LeaseSchemaError)


def test_an_interrupted_sqlite_statement_past_the_deadline_is_a_timeout() -> None:
    exc = sqlite_error(sqlite3.OperationalError, "interrupted", "SQLITE_INTERRUPT")
    got = tr(exc, sent=False, timed_out=True)
    assert isinstance(got, LeaseTimeoutError) and got.outcome_unknown is False


@pytest.mark.parametrize(
    ("exc", "broken"),
    [
        (pg.AdminShutdown("terminating connection"), True),
        (pg.ConnectionFailure("server closed the connection"), True),
        (pg.CrashShutdown("the database system is in recovery mode"), True),
        (psycopg.OperationalError("connection refused"), True),
        (psycopg.InterfaceError("the connection is closed"), True),
        (BrokenPipeError(32, "Broken pipe"), True),
        (pg.QueryCanceled("canceling statement"), False),  # the connection is still fine
        (pg.UniqueViolation("duplicate key"), False),
        (pg.UndefinedTable("no table"), False),
        (ValueError("not a driver error"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_is_broken_tells_which_connections_to_discard(exc: BaseException, broken: bool) -> None:
    assert is_broken(exc) is broken
