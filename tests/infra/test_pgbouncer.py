"""`SqlLeaseProvider.from_url(..., pooler=...)` through a real PgBouncer (issue 13).

The pooler runs with its default settings (no ``ignore_startup_parameters``), in transaction
mode with fewer server connections than clients, so server connections really move between
clients. What is shown: every contract operation works; 64 concurrent callers get no error and
answers consistent with one owner at a time; the server-side timeouts are in force for every
statement (a statement stuck on a row lock is cancelled by the server: `LeaseTimeoutError`,
nothing applied) and leak to no other client of the server connection; a call past its
deadline returns at once and its statement is cancelled on the server; session mode works;
waiting polls behind a transaction pooler or listens on ``listen_url``. The whole contract
suite runs through a transaction pooler too (``pgbouncer-transaction`` in
``tests/contract/conftest.py``), and so does the multi-process race (``test_pgbouncer_races``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import (
    AcquireResult,
    LeaseError,
    LeaseTimeoutError,
    LeaseValueError,
    SqlLeaseProvider,
)
from sql_lease._holding.wait import hub_for
from sql_lease.backends import backend_for
from sql_lease.backends.postgres.listen import Listener

from ._grants import check_acquires
from .pgbouncer import PgBouncer

pytestmark = [pytest.mark.infra, pytest.mark.timeout(60)]


def through(bouncer: PgBouncer, database_url: str) -> str:
    return bouncer.url(make_url(database_url).database or "postgres")


def direct(database_url: str) -> psycopg.Connection[tuple[object, ...]]:
    u = make_url(database_url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)


def truncate(database_url: str) -> None:
    with direct(database_url) as conn:
        conn.execute("TRUNCATE leases")


@pytest.fixture(scope="module")
def tx_bouncer() -> Iterator[PgBouncer]:
    """Transaction pooling, 4 server connections, the pooler's defaults otherwise."""
    with PgBouncer(pool_mode="transaction", pool_size=4) as b:
        yield b


@pytest.fixture(scope="module")
def session_bouncer() -> Iterator[PgBouncer]:
    """Session pooling: a client keeps its server connection, so the pooler needs room for the
    provider's whole pool (10 + 10 overflow) and its LISTEN connection."""
    with PgBouncer(pool_mode="session", pool_size=25) as b:
        yield b


@pytest.fixture
async def pooled(tx_bouncer: PgBouncer, database_url: str) -> AsyncIterator[SqlLeaseProvider]:
    truncate(database_url)
    provider = SqlLeaseProvider.from_url(
        through(tx_bouncer, database_url), timeout=10, pooler="transaction"
    )
    yield provider
    await provider.aclose()


def check_pooler_arguments(from_url: Callable[..., object]) -> None:
    """``from_url`` (async or sync) refuses bad ``pooler``/``listen_url`` before any I/O."""
    nowhere = "postgresql://u:pw@127.0.0.1:1/db"
    with pytest.raises(LeaseValueError, match="pooler must be"):
        from_url(nowhere, pooler="statement")
    with pytest.raises(LeaseValueError, match="synchronous_commit=False"):
        from_url(nowhere, pooler="transaction", synchronous_commit=False)
    with pytest.raises(LeaseValueError, match="no connection pooler"):
        from_url("sqlite:///nowhere.db", pooler="session")
    with pytest.raises(LeaseValueError):
        from_url(nowhere, pooler="transaction", listen_url="mysql://x/y")


def test_pooler_is_checked_before_any_io() -> None:
    check_pooler_arguments(SqlLeaseProvider.from_url)


async def test_every_operation_works_through_transaction_pooling_with_its_defaults(
    pooled: SqlLeaseProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sql_lease")
    key = "pooled\0key"
    first = await pooled.acquire_lease(key, "a", 5000)
    assert first.acquired and first.owner == "a" and first.fence is not None
    assert (await pooled.acquire_lease(key, "b", 5000)).owner == "a"
    assert await pooled.get_lease_owner(key) == "a"
    assert await pooled.renew_lease(key, "a", timedelta(seconds=5))
    renewal = await pooled.renew(key, "a", 5000)
    assert renewal is not None and renewal.fence == first.fence
    assert await pooled.transfer_lease(key, "a", "b", 5000)
    lease = await pooled.get_lease(key)
    assert lease is not None and lease.owner == "b" and lease.fence > first.fence
    assert [held.key for held in await pooled.list_leases()] == [key]
    assert await pooled.now() is not None
    await pooled.release_lease(key, "b")
    assert await pooled.get_lease_owner(key) is None
    # One round trip per call on psycopg, no startup parameter, no prepared statement; the
    # timeouts are set per statement, so there is nothing to warn about.
    assert pooled.engine.dialect.driver == "psycopg"
    assert not [r for r in caplog.records if r.name == "sql_lease"]


async def test_64_concurrent_callers_no_errors_and_one_owner_at_a_time(
    pooled: SqlLeaseProvider,
) -> None:
    ttl = 200
    keys = ("hot0", "hot1", "hot2")
    answers: list[tuple[str, AcquireResult]] = []
    errors: list[BaseException] = []
    stop = time.monotonic() + 2.0

    async def caller(i: int) -> None:
        n = 0
        while time.monotonic() < stop or n < 3:
            key = keys[(i + n) % len(keys)]
            n += 1
            try:
                answers.append((key, await pooled.acquire_lease(key, f"o{i}", ttl)))
            except LeaseError as exc:
                errors.append(exc)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(caller(i) for i in range(64)))
    assert errors == []
    check_acquires(answers, ttl, keys)


async def test_a_statement_stuck_on_a_row_lock_is_cancelled_by_the_server(
    tx_bouncer: PgBouncer, database_url: str
) -> None:
    truncate(database_url)
    provider = SqlLeaseProvider.from_url(
        through(tx_bouncer, database_url), timeout=1.0, pooler="transaction"
    )
    try:
        await provider.acquire_lease("locked", "a", 60_000)
        with direct(database_url) as blocker:
            blocker.execute("SELECT 1 FROM leases FOR UPDATE")
            with pytest.raises(LeaseTimeoutError) as caught:
                await provider.renew_lease("locked", "a", 60_000)
            blocker.rollback()
        # The server's statement/lock timeout (80% of the call's) ended it, before the client's
        # deadline: a clean cancel, so the outcome is known (nothing was applied).
        cause = caught.value.__cause__
        assert isinstance(cause, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable)
        assert not caught.value.outcome_unknown
        # The pooler and the provider go on: the next calls work.
        assert await provider.renew_lease("locked", "a", 60_000)
        assert await provider.get_lease_owner("locked") == "a"
    finally:
        await provider.aclose()


async def test_the_timeouts_set_per_statement_leak_to_no_other_client(
    pooled: SqlLeaseProvider, tx_bouncer: PgBouncer, database_url: str
) -> None:
    await asyncio.gather(*(pooled.acquire_lease(f"leak{i}", "a", 5000) for i in range(32)))
    check_no_timeouts_left(tx_bouncer, database_url)


def check_no_timeouts_left(bouncer: PgBouncer, database_url: str) -> None:
    """Other clients of the pooler get the same server connections: none kept the settings."""
    dsn = bouncer.dsn(make_url(database_url).database or "postgres")
    for _ in range(8):
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as other:
            row = other.execute(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
                prepare=False,
            ).fetchone()
            assert row == ("0", "0")


async def test_a_call_past_its_deadline_returns_and_the_server_cancels_it(
    pooled: SqlLeaseProvider, database_url: str
) -> None:
    """The adaptor's own contract: cancelled mid-statement, the fetch raises at once; `settle`
    returns once the server has ended the statement (so dropping the connection is safe)."""
    backend = backend_for(pooled.engine)
    adapt = backend.adaptor(10.0, True)
    async with pooled.engine.connect() as conn:
        fairy = await conn.get_raw_connection()
        fetch = adapt(fairy, lambda: backend.catalogue("leases", None, "public"))
        marker = f"sql_lease_sleep_{id(fairy)}"
        sleeping = asyncio.ensure_future(fetch(f"SELECT pg_sleep(30), '{marker}'"))
        with direct(database_url) as watcher:
            watcher.autocommit = True
            query = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND state = 'active'"
            pattern = f"%SELECT pg_sleep(30), '{marker}'%"
            # The server's own view is the only signal that the statement is running.
            while watcher.execute(query, (pattern,)).fetchone() != (1,):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            sleeping.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sleeping
            await backend.settle(fairy)
            assert watcher.execute(query, (pattern,)).fetchone() == (0,)
        await conn.invalidate()


async def test_session_pooling_works_and_waiters_listen(
    session_bouncer: PgBouncer, database_url: str
) -> None:
    truncate(database_url)
    url = through(session_bouncer, database_url)
    provider = SqlLeaseProvider.from_url(url, timeout=10, pooler="session")
    try:
        first = await provider.acquire_lease("s", "a", 30_000)
        assert first.acquired
        assert await provider.renew_lease("s", "a", 30_000)
        assert await provider.transfer_lease("s", "a", "b", 30_000)
        # LISTEN works through a session pooler: the waiter is woken by the release.
        waiter = asyncio.ensure_future(provider.wait_for_lease("s", "c", 5000, timeout_ms=20_000))
        listener = await _asleep(provider, "s", waiter)
        assert isinstance(listener, Listener)
        notified = listener.notifications
        await provider.release_lease("s", "b")
        assert (await waiter).acquired
        assert listener.notifications > notified
        results = await asyncio.gather(
            *(provider.acquire_lease(f"k{i % 4}", f"o{i}", 5000) for i in range(64)),
            return_exceptions=True,
        )
        assert not [r for r in results if isinstance(r, BaseException)]
        assert sum(1 for r in results if isinstance(r, AcquireResult) and r.acquired) == 4
    finally:
        await provider.aclose()


async def test_behind_transaction_pooling_waiters_poll_and_say_so(
    pooled: SqlLeaseProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sql_lease.wait")
    assert (await pooled.acquire_lease("w", "a", 30_000)).acquired
    waiter = asyncio.ensure_future(pooled.wait_for_lease("w", "b", 5000, timeout_ms=20_000))
    assert await _asleep(pooled, "w", waiter) is None
    await pooled.release_lease("w", "a")
    assert (await waiter).acquired
    polls = [r for r in caplog.records if r.name == "sql_lease.wait" and "poll" in r.message]
    assert len(polls) == 1 and polls[0].levelno == logging.INFO


async def test_listen_url_gives_waiters_a_direct_listener(
    tx_bouncer: PgBouncer, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sql_lease.wait")
    truncate(database_url)
    provider = SqlLeaseProvider.from_url(
        through(tx_bouncer, database_url),
        timeout=10,
        pooler="transaction",
        listen_url=database_url,
    )
    try:
        assert (await provider.acquire_lease("w", "a", 30_000)).acquired
        waiter = asyncio.ensure_future(provider.wait_for_lease("w", "b", 5000, timeout_ms=20_000))
        listener = await _asleep(provider, "w", waiter)
        assert isinstance(listener, Listener)
        notified = listener.notifications
        await provider.release_lease("w", "a")
        assert (await waiter).acquired
        assert listener.notifications > notified  # woken by NOTIFY on the direct connection
        assert any("listen" in r.message for r in caplog.records if r.name == "sql_lease.wait")
    finally:
        await provider.aclose()


async def _asleep(
    provider: SqlLeaseProvider, key: str, waiter: asyncio.Future[AcquireResult]
) -> object:
    """Wait until ``waiter`` sleeps on ``key`` (listening, if it has a listener); its listener."""
    hub = hub_for(provider)
    while not waiter.done():
        listener = hub.listener
        if hub.sleeping(key) == 1 and (listener is None or getattr(listener, "connected", False)):
            return listener
        await asyncio.sleep(0.005)
    raise AssertionError(f"the waiter finished before sleeping: {waiter.result()}")
