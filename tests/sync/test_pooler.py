"""`sql_lease.sync.SqlLeaseProvider.from_url(..., pooler=...)` through a real PgBouncer (issue 13).

The pooler runs with its default settings (it refuses every startup parameter it does not
track, ``options`` included), in transaction mode with fewer server connections than callers,
so server connections really move between clients. What is shown: every operation works; 64
threads get no error and one owner at a time; the server-side timeouts are in force for every
statement (a statement stuck on a row lock is ended by the server: `LeaseTimeoutError`,
nothing applied) and leak to no other client; a database before revision 0005 falls back to
the plain statements; session pooling works and its waiters listen; behind transaction pooling
waiters poll, or listen on ``listen_url``. The whole sync contract suite runs through the
transaction pooler too (``pgbouncer`` in ``tests/sync/conftest.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sql_lease import AcquireResult, LeaseError, LeaseTimeoutError, LeaseValueError, migrate
from sql_lease.sync import SqlLeaseProvider

from ..infra._grants import check_acquires
from ..infra.pgbouncer import PgBouncer
from ..infra.test_pgbouncer import check_no_timeouts_left, check_pooler_arguments
from .test_executor_reconnect import _admin, _app, _pids, _terminate

pytestmark = [pytest.mark.infra, pytest.mark.timeout(60)]

LONG = 60_000


def through(bouncer: PgBouncer, database_url: str) -> str:
    return bouncer.url(make_url(database_url).database or "postgres")


def direct(database_url: str) -> psycopg.Connection[tuple[Any, ...]]:
    u = make_url(database_url)
    return psycopg.connect(
        host=u.host, port=u.port, user=u.username, dbname=u.database, autocommit=True
    )


@pytest.fixture(scope="module")
def tx_bouncer() -> Iterator[PgBouncer]:
    """Transaction pooling, 4 server connections, the pooler's defaults otherwise."""
    with PgBouncer(pool_mode="transaction", pool_size=4) as b:
        yield b


@pytest.fixture
def pooled(tx_bouncer: PgBouncer, database_url: str) -> Iterator[SqlLeaseProvider]:
    with direct(database_url) as conn:
        conn.execute("TRUNCATE leases")
    provider = SqlLeaseProvider.from_url(
        through(tx_bouncer, database_url), timeout=10, pooler="transaction", pool_size=16
    )
    yield provider
    provider.close()


def eventually(check: Callable[[], bool], what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.01)


def test_pooler_and_listen_url_are_checked_before_any_io() -> None:
    check_pooler_arguments(SqlLeaseProvider.from_url)
    nowhere = "postgresql://u:pw@127.0.0.1:1/db"
    with pytest.raises(LeaseValueError, match="no LISTEN"):
        SqlLeaseProvider.from_url("sqlite:///nowhere.db", listen_url="sqlite:///other.db")
    with pytest.raises(LeaseValueError, match="same database kind"):
        SqlLeaseProvider.from_url(nowhere, pooler="transaction", listen_url="sqlite:///x.db")


def test_every_operation_works_through_transaction_pooling_with_its_defaults(
    pooled: SqlLeaseProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sql_lease")
    key = "pooled\0key"
    first = pooled.acquire_lease(key, "a", 5000)
    assert first.acquired and first.owner == "a" and first.fence is not None
    assert pooled.acquire_lease(key, "b", 5000).owner == "a"
    assert pooled.get_lease_owner(key) == "a"
    assert pooled.renew_lease(key, "a", timedelta(seconds=5))
    renewal = pooled.renew(key, "a", 5000)
    assert renewal is not None and renewal[0] == first.fence
    assert pooled.transfer_lease(key, "a", "b", 5000)
    lease = pooled.get_lease(key)
    assert lease is not None and lease.owner == "b" and lease.fence > first.fence
    assert [held.key for held in pooled.list_leases()] == [key]
    assert pooled.renew_leases([(key, "b")], 5000) == [True]
    pooled.release_lease(key, "b")
    assert pooled.get_lease_owner(key) is None
    # The server functions of revision 0005 are there: nothing to warn about.
    assert not [r for r in caplog.records if r.name == "sql_lease"]


def test_each_statement_runs_with_the_server_side_timeouts(pooled: SqlLeaseProvider) -> None:
    # 80% of the provider's 10 s, set inside the call's own round trip.
    rows = pooled.executor.run(
        "check",
        False,
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
        (),
        10,
    )
    assert rows == [("8s", "8s")]


def test_64_threads_no_errors_and_one_owner_at_a_time(pooled: SqlLeaseProvider) -> None:
    ttl = 200
    keys = ("hot0", "hot1", "hot2")
    answers: list[tuple[str, AcquireResult]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = time.monotonic() + 2.0

    def caller(i: int) -> None:
        n = 0
        while time.monotonic() < stop or n < 3:
            key = keys[(i + n) % len(keys)]
            n += 1
            try:
                result = pooled.acquire_lease(key, f"o{i}", ttl)
            except LeaseError as exc:
                with lock:
                    errors.append(exc)
            else:
                with lock:
                    answers.append((key, result))
            time.sleep(0.01)

    with ThreadPoolExecutor(64) as threads:
        list(threads.map(caller, range(64)))
    assert errors == []
    check_acquires(answers, ttl, keys)


def test_a_statement_stuck_on_a_row_lock_is_ended_by_the_server(
    tx_bouncer: PgBouncer, database_url: str
) -> None:
    with SqlLeaseProvider.from_url(
        through(tx_bouncer, database_url), timeout=1.0, pooler="transaction"
    ) as provider:
        provider.release_lease("locked", "a")
        assert provider.acquire_lease("locked", "a", LONG).acquired
        with direct(database_url) as blocker, blocker.transaction():
            blocker.execute("SELECT 1 FROM leases WHERE key = 'locked'::bytea FOR UPDATE")
            started = time.monotonic()
            with pytest.raises(LeaseTimeoutError) as caught:
                provider.renew_lease("locked", "a", LONG)
            took = time.monotonic() - started
        # The server's lock timeout (80% of the call's) ended it before the client's deadline:
        # a clean cancel, so the outcome is known (nothing was applied).
        assert took < 1.0
        cause = caught.value.__cause__
        assert isinstance(cause, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable)
        assert not caught.value.outcome_unknown
        assert provider.renew_lease("locked", "a", LONG)  # and the next call works
        provider.release_lease("locked", "a")


def test_the_timeouts_leak_to_no_other_client(
    pooled: SqlLeaseProvider, tx_bouncer: PgBouncer, database_url: str
) -> None:
    with ThreadPoolExecutor(16) as threads:
        list(threads.map(lambda i: pooled.acquire_lease(f"leak{i}", "a", 5000), range(64)))
    check_no_timeouts_left(tx_bouncer, database_url)


def test_before_revision_0005_the_plain_statements_run(
    tx_bouncer: PgBouncer, make_database: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    url = make_database()
    migrate.upgrade(url, "0004")
    with (
        caplog.at_level(logging.WARNING, logger="sql_lease"),
        SqlLeaseProvider.from_url(
            through(tx_bouncer, url), timeout=10, pooler="transaction"
        ) as provider,
    ):
        for _ in range(2):
            assert provider.acquire_lease("old", "a", 5000).acquired
            assert provider.get_lease_owner("old") == "a"
            assert provider.renew_lease("old", "a", 5000)
            provider.release_lease("old", "a")
    warned = [r for r in caplog.records if "server functions" in r.getMessage()]
    assert len(warned) == 1
    assert "0005" in warned[0].getMessage()


def test_the_hot_statements_run_as_the_server_functions_of_revision_0006(
    tx_bouncer: PgBouncer, make_database: Callable[[], str]
) -> None:
    # The server counts each function's calls (track_functions, set for the database before
    # its first connection; the counts reach pg_stat_user_functions when the backends exit).
    url = make_database()
    migrate.upgrade(url)
    name = make_url(url).database
    with direct(url) as conn:
        conn.execute(f"ALTER DATABASE \"{name}\" SET track_functions = 'all'")
    with SqlLeaseProvider.from_url(
        through(tx_bouncer, url), timeout=10, pooler="transaction"
    ) as provider:
        assert provider.acquire_lease("fn", "a", 5000).acquired
        assert provider.get_lease_owner("fn") == "a"
        assert provider.renew_lease("fn", "a", 5000)
        lease = provider.get_lease("fn")
        assert lease is not None and lease.owner == "a"
        assert provider.transfer_lease("fn", "a", "b", 5000)
        provider.release_lease("fn", "b")
    with direct(url) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )

        def called() -> set[str]:
            rows = conn.execute(
                "SELECT funcname FROM pg_stat_user_functions WHERE schemaname = 'public'"
            ).fetchall()
            conn.execute("SELECT pg_stat_clear_snapshot()")
            return {funcname for (funcname,) in rows}

        wanted = {f"leases_{op}" for op in ("acquire", "get_owner", "renew", "get_lease")}
        wanted |= {"leases_transfer", "leases_release"}
        eventually(lambda: wanted <= called(), f"calls of {sorted(wanted)}")


def _woken(waiter_side: SqlLeaseProvider, holder_side: SqlLeaseProvider, key: str) -> Any:
    """``waiter_side`` waits for ``key`` held by ``holder_side``, which then releases it; the
    waiter's result (taken before the holder's lease would have expired)."""
    holder_side.release_lease(key, "x")
    held = holder_side.acquire_lease(key, "x", LONG)
    got: list[AcquireResult] = []
    thread = threading.Thread(
        target=lambda: got.append(waiter_side.wait_for_lease(key, "a", LONG, timeout_ms=LONG))
    )
    thread.start()
    eventually(lambda: waiter_side.waiters.sleeping(key) == 1, "the waiter asleep")
    holder_side.release_lease(key, "x")
    thread.join(10)
    assert got and got[0].acquired and got[0].expires_at is not None
    assert held.expires_at is not None
    assert got[0].expires_at - timedelta(milliseconds=LONG) < held.expires_at
    waiter_side.release_lease(key, "a")
    return got[0]


def test_behind_transaction_pooling_waiters_poll_and_say_so(
    pooled: SqlLeaseProvider,
    tx_bouncer: PgBouncer,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert pooled.waiters.listener is None
    caplog.set_level(logging.INFO, logger="sql_lease.wait")
    with SqlLeaseProvider.from_url(
        through(tx_bouncer, database_url), timeout=10, pooler="transaction"
    ) as other:
        assert other.waiters.listener is None
        _woken(other, pooled, "poll\0k")
    polls = [r for r in caplog.records if r.name == "sql_lease.wait" and "poll" in r.message]
    assert polls


def test_listen_url_gives_waiters_a_direct_listener(
    pooled: SqlLeaseProvider,
    tx_bouncer: PgBouncer,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sql_lease.wait")
    with SqlLeaseProvider.from_url(
        through(tx_bouncer, database_url),
        timeout=10,
        pooler="transaction",
        listen_url=database_url,
    ) as waiter_side:
        key = "listen\0k"
        pooled.release_lease(key, "x")
        assert pooled.acquire_lease(key, "x", LONG).acquired
        got: list[AcquireResult] = []
        thread = threading.Thread(
            target=lambda: got.append(waiter_side.wait_for_lease(key, "a", LONG, timeout_ms=LONG))
        )
        thread.start()
        eventually(lambda: waiter_side.waiters.sleeping(key) == 1, "the waiter asleep")
        listener = waiter_side.waiters.listener
        assert listener is not None
        eventually(lambda: listener.connected, "the listener connected")
        before = listener.notifications
        pooled.release_lease(key, "x")  # through the pooler: its NOTIFY reaches the listener
        thread.join(10)
        assert got and got[0].acquired
        assert listener.notifications > before
        waiter_side.release_lease(key, "a")
    assert any("listen" in r.message for r in caplog.records if r.name == "sql_lease.wait")


def test_session_pooling_works_and_waiters_listen(database_url: str) -> None:
    with (
        PgBouncer(pool_mode="session", pool_size=12) as bouncer,
        SqlLeaseProvider.from_url(
            through(bouncer, database_url), timeout=10, pooler="session", pool_size=4
        ) as waiter_side,
        SqlLeaseProvider.from_url(
            through(bouncer, database_url), timeout=10, pooler="session", pool_size=4
        ) as holder_side,
    ):
        rows = waiter_side.executor.run(
            "check", False, "SELECT current_setting('statement_timeout')", (), 10
        )
        assert rows == [("8s",)]
        listener = waiter_side.waiters.listener
        assert listener is not None  # LISTEN works through session pooling
        _woken(waiter_side, holder_side, "session\0k")
        assert listener.notifications > 0


def test_pooler_mode_replaces_connections_the_server_ended(database_url: str) -> None:
    # Pooler mode straight to the server (its calls go through libpq's PQexec): every backend
    # of the provider is terminated between calls; the next read runs again on a fresh
    # connection, the next write finds its connection dead before sending: both answer.
    app = _app()
    url = make_url(database_url).update_query_dict({"application_name": app})
    with (
        SqlLeaseProvider.from_url(
            url.render_as_string(hide_password=False), timeout=10, pooler="transaction"
        ) as provider,
        _admin(database_url) as admin,
    ):
        assert provider.acquire_lease("ended", "a", LONG).acquired
        for call in (
            lambda: provider.get_lease_owner("ended"),
            lambda: provider.renew_lease("ended", "a", LONG),
        ):
            pids = _pids(admin, app)
            assert pids
            _terminate(admin, pids)
            assert call() in ("a", True)
        provider.release_lease("ended", "a")
        assert provider.get_lease_owner("ended") is None
