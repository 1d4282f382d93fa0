"""Database failures become typed `LeaseError`s, within the timeout, and the provider recovers."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from sql_lease import (
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseError,
    LeaseSchemaError,
    LeaseTimeoutError,
    SqlLeaseProvider,
)

from .._events import eventually
from .._pg import terminate_backends

LONG = 30_000
# What a call may take beyond its timeout on a busy machine. A hang, the failure these tests
# look for, would take asyncpg's 60 s connect timeout or for ever.
SLACK = 2.0


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never answers (a stalled network)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    server.settimeout(0.05)
    yield int(server.getsockname()[1])
    for conn in accepted:
        conn.close()
    server.close()


async def test_closed_port_raises_connection_error_without_the_password() -> None:
    port = closed_port()
    provider = SqlLeaseProvider.from_url(
        f"postgresql://user:s3cr%21t@127.0.0.1:{port}/db", timeout=3, connect_timeout=2
    )
    started = time.monotonic()
    try:
        with pytest.raises(LeaseConnectionError) as info:
            await provider.acquire_lease("k", "a", LONG)
    finally:
        await provider.aclose()
    assert time.monotonic() - started < 3 + SLACK
    err = info.value
    assert err.__cause__ is not None
    assert err.operation == "acquire_lease"
    assert "s3cr" not in str(err) and "s3cr" not in repr(err)
    assert f"127.0.0.1:{port}" in str(err)


async def test_stalled_server_ends_in_a_typed_error_within_the_timeout(silent_server: int) -> None:
    provider = SqlLeaseProvider.from_url(
        f"postgresql://u:pw@127.0.0.1:{silent_server}/db", timeout=1.0, connect_timeout=0.5
    )
    started = time.monotonic()
    try:
        with pytest.raises((LeaseTimeoutError, LeaseConnectionError)):
            await provider.get_lease_owner("k")
        with pytest.raises(LeaseDatabaseError):
            await provider.renew_lease("k", "a", LONG)
    finally:
        await provider.aclose()
    assert time.monotonic() - started < 2 * 1.0 + SLACK


async def test_missing_table_is_a_schema_error_that_says_to_migrate(database_url: str) -> None:
    provider = SqlLeaseProvider.from_url(database_url, table_name="not_migrated")
    try:
        with pytest.raises(LeaseSchemaError, match="migrat"):
            await provider.acquire_lease("k", "a", LONG)
        with pytest.raises(LeaseSchemaError):
            await provider.get_lease_owner("k")
    finally:
        await provider.aclose()


@pytest.fixture
def row_locker(database_url: str) -> Iterator[psycopg.Connection]:
    u = make_url(database_url)
    conn = psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)
    yield conn
    conn.rollback()
    conn.close()


async def test_lock_wait_hits_the_server_side_timeout_and_then_recovers(
    database_url: str, sql_provider: SqlLeaseProvider, row_locker: psycopg.Connection
) -> None:
    await sql_provider.acquire_lease("locked", "a", LONG)
    # The server gives up at 80% of the timeout, 0.6 s before the client would: room enough
    # for its answer to arrive first on a busy machine.
    provider = SqlLeaseProvider.from_url(database_url, timeout=3.0)
    try:
        row_locker.execute("SELECT * FROM leases WHERE key = 'locked'::bytea FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(LeaseTimeoutError) as info:
            await provider.renew_lease("locked", "a", LONG)
        assert time.monotonic() - started < 3.0 + SLACK
        assert info.value.__cause__ is not None
        assert info.value.outcome_unknown is False  # the server cancelled it: nothing applied
        # Other keys are unaffected while the row is locked.
        assert (await provider.acquire_lease("free", "a", LONG)).acquired
        row_locker.rollback()
        assert await provider.renew_lease("locked", "a", LONG) is True
    finally:
        await provider.aclose()


async def test_client_side_timeout_bounds_calls_on_a_callers_engine(
    database_url: str, sql_provider: SqlLeaseProvider, row_locker: psycopg.Connection
) -> None:
    await sql_provider.acquire_lease("locked", "a", LONG)
    engine = create_async_engine(make_url(database_url).set(drivername="postgresql+asyncpg"))
    provider = SqlLeaseProvider(engine, timeout=0.5)
    try:
        row_locker.execute("SELECT * FROM leases WHERE key = 'locked'::bytea FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(LeaseTimeoutError) as info:
            await provider.transfer_lease("locked", "a", "b", LONG)
        assert time.monotonic() - started < 0.5 + SLACK
        assert info.value.outcome_unknown is True
        # The provider has the server cancel the statement: it stops waiting for the lock.
        await eventually(lambda: not lock_waits(database_url), "the timed-out statement gone")
        row_locker.rollback()
        # The timed-out statement was cancelled: no zombie transfer, and the pool recovered.
        assert await provider.get_lease_owner("locked") == "a"
        assert await provider.transfer_lease("locked", "a", "b", LONG) is True
        await provider.aclose()  # does not dispose an engine it does not own
        assert await SqlLeaseProvider(engine).get_lease_owner("locked") == "b"
    finally:
        await engine.dispose()


def query(database_url: str, sql: str) -> int:
    u = make_url(database_url)
    with psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    ) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def lock_waits(database_url: str) -> int:
    """Statements on the test database waiting for a lock."""
    return query(
        database_url,
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )


def backends(database_url: str) -> int:
    """The library's backends on the test database (``application_name`` sql_lease)."""
    return query(
        database_url,
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'sql_lease'",
    )


@pytest.fixture
async def busy_provider(database_url: str) -> AsyncIterator[SqlLeaseProvider]:
    provider = SqlLeaseProvider.from_url(database_url, timeout=5, pool_size=4)
    yield provider
    await provider.aclose()


async def test_provider_recovers_after_its_backends_are_terminated(
    database_url: str, busy_provider: SqlLeaseProvider, sql_provider: SqlLeaseProvider
) -> None:
    provider = busy_provider
    # Fill the pool with several live connections.
    await asyncio.gather(*(provider.acquire_lease(f"k{i}", "a", LONG) for i in range(8)))
    assert terminate_backends(database_url) >= 2
    await eventually(lambda: not backends(database_url), "the terminated backends gone")
    await asyncio.sleep(0.05)  # a few loop turns: the client reads the closed sockets
    failures = 0
    for i in range(8):
        try:
            assert await provider.renew_lease(f"k{i}", "a", LONG) is True
        except LeaseConnectionError:
            failures += 1
    assert failures <= 1, failures
    # Again, without giving the client time to notice: at most one call per dead connection
    # fails, with a typed error, and the calls after that succeed.
    assert terminate_backends(database_url) >= 1
    outcomes: list[object] = []
    for i in range(12):
        try:
            outcomes.append(await provider.get_lease_owner(f"k{i % 8}"))
        except LeaseError as exc:
            assert isinstance(exc, LeaseConnectionError), exc
            outcomes.append(exc)
    assert outcomes[-4:] == ["a", "a", "a", "a"]
